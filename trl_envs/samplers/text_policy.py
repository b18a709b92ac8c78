"""A :class:`~trl_envs.samplers.base.Sampler` whose replies come from a Python function of the prompt text.

Useful to play an env with a scripted policy through exactly the interface a model sees (the rendered prompt in,
reply tokens out): baselines (``bench/cartpole.py``'s "push toward the lean"), replaying an action sequence in
tests, or checking that an env's text interface is solvable before training a model on it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.renderer import Renderer
from ..core.types import TokensWithLogprobs
from .base import SampleRequest


class TextPolicySampler:
    """Answers each request with ``policy(prompt_text)``, tokenized and closed with the end-of-turn token.

    Args:
        renderer: gives the tokenizer (to decode prompts and encode replies) and the end-of-turn token.
        policy: ``(prompt_text) -> reply_text``; ``prompt_text`` is the whole decoded prompt, special tokens kept
            (so a policy can find the last ``<|im_start|>user`` turn).

    A reply longer than the request's ``max_tokens`` is cut, with ``finish_reason="length"``, as a model's would
    be. Logprobs are reported as 0.
    """

    def __init__(self, renderer: Renderer, policy: Callable[[str], str]):
        self.renderer, self.policy = renderer, policy
        self.num_calls = 0

    def sample(self, requests: list[SampleRequest]) -> list[TokensWithLogprobs]:
        self.num_calls += 1
        tokenizer = self.renderer.tokenizer
        out = []
        for r in requests:
            reply = self.policy(tokenizer.decode(r.prompt, skip_special_tokens=False))
            tokens = tokenizer.encode(reply, add_special_tokens=False) + [self.renderer.end_of_turn_token_id]
            reason = "stop"
            if len(tokens) > r.max_tokens:
                tokens, reason = tokens[: r.max_tokens], "length"
            out.append(TokensWithLogprobs(tokens, [0.0] * len(tokens), reason))
        return out
