"""A trl_envs :class:`~trl_envs.samplers.hf.Sampler` as a tinker-cookbook ``MessageCompleter``.

Cookbook envs that talk to another model -- the answerer of ``twenty_questions``, the opponent of ``text_arena`` --
take a ``MessageCompleter``; in the cookbook it samples from a Tinker service. :class:`SamplerMessageCompleter`
answers from any sampler here instead: the tiny model (``HFSampler``), a frozen local model, or a scripted policy
(``TextPolicySampler``), so those envs run offline.
"""

from __future__ import annotations

import asyncio

from tinker_cookbook.completers import MessageCompleter, StopCondition
from tinker_cookbook.renderers import Message, Renderer

from ..samplers.hf import SampleRequest, Sampler
from .convert import tokens_of


class SamplerMessageCompleter(MessageCompleter):
    """Renders the conversation with a cookbook ``renderer``, samples one reply with ``sampler`` (in a worker
    thread, so the rollout's event loop keeps running) and parses it back into a message.

    Args:
        sampler: any trl_envs sampler.
        renderer: the cookbook renderer matching the sampler's tokenizer.
        max_tokens: token budget of one reply.
        stop_condition: default: the renderer's stop sequences.
    """

    def __init__(self, sampler: Sampler, renderer: Renderer, max_tokens: int = 32,
                 stop_condition: StopCondition | None = None):
        self.sampler, self.renderer, self.max_tokens = sampler, renderer, max_tokens
        self.stop_condition = list(stop_condition) if stop_condition is not None else renderer.get_stop_sequences()

    async def __call__(self, messages: list[Message]) -> Message:
        prompt = tokens_of(self.renderer.build_generation_prompt(messages), "SamplerMessageCompleter")
        request = SampleRequest(prompt, list(self.stop_condition), self.max_tokens)
        (out,) = await asyncio.to_thread(self.sampler.sample, [request])
        message, _ok = self.renderer.parse_response(out.tokens)
        return message
