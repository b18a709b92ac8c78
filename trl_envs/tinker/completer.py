"""A trl_envs :class:`~trl_envs.samplers.base.Sampler` as a tinker-cookbook ``MessageCompleter``.

Cookbook envs that talk to another model -- the answerer of ``twenty_questions``, the opponent of ``text_arena``, a
rubric grader -- take a ``MessageCompleter``; in the cookbook it samples from a Tinker service.
:class:`SamplerMessageCompleter` answers from a sampler here instead: the policy being trained (self-play), a frozen
local model (``HFSampler`` over a copy), or a scripted policy (``TextPolicySampler``), so those envs run offline.

Inside a rollout batch its requests join the batch's :class:`~trl_envs.rollout.batching.BatchingPolicy`: the
completions that all envs ask for in the same turn go out in ONE sampler call (per sampler), under the same rule as
the policy's own actions. Outside one (a plain ``await completer(messages)``) it samples alone, in a worker thread.
"""

from __future__ import annotations

import asyncio

from tinker_cookbook.completers import MessageCompleter, StopCondition
from tinker_cookbook.renderers import Message, Renderer

from ..rollout.batching import current_batcher
from ..samplers.base import Sampler, SampleRequest
from .convert import tokens_of


class SamplerMessageCompleter(MessageCompleter):
    """Renders the conversation with a cookbook ``renderer``, samples one reply and parses it back into a message.

    Args:
        sampler: the model that replies. ``None``: the policy being trained, i.e. the sampler of the rollout batch
            the call is made from (self-play); such a completer can only be called inside a rollout. A sampler of
            its own (a frozen copy of the model, a fixed opponent) is sampled in the batch too, in its own call.
        renderer: the cookbook renderer matching the sampler's tokenizer.
        max_tokens: token budget of one reply.
        stop_condition: default: the renderer's stop sequences.
    """

    def __init__(
        self,
        sampler: Sampler | None,
        renderer: Renderer,
        max_tokens: int = 32,
        stop_condition: StopCondition | None = None,
    ):
        if max_tokens < 1:
            raise ValueError(f"SamplerMessageCompleter: max_tokens must be >= 1, got {max_tokens}")
        self.sampler, self.renderer, self.max_tokens = sampler, renderer, max_tokens
        self.stop_condition = list(stop_condition) if stop_condition is not None else renderer.get_stop_sequences()

    async def __call__(self, messages: list[Message]) -> Message:
        prompt = tokens_of(self.renderer.build_generation_prompt(messages), "SamplerMessageCompleter")
        batcher = current_batcher()
        if batcher is not None:
            out = await batcher.sample(prompt, list(self.stop_condition), self.max_tokens, sampler=self.sampler)
        elif self.sampler is None:
            raise RuntimeError(
                "SamplerMessageCompleter(sampler=None) samples the policy being trained, so it can only "
                "be called inside a rollout (run_rollout_batch or a trainer); pass a sampler to use it "
                "elsewhere"
            )
        else:
            (out,) = await asyncio.to_thread(
                self.sampler.sample, [SampleRequest(prompt, list(self.stop_condition), self.max_tokens)]
            )
        message, _ok = self.renderer.parse_response(out.tokens)
        return message
