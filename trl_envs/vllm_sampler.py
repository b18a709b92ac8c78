"""A :class:`~trl_envs.sampler.Sampler` over TRL's vLLM generation (``use_vllm=True``, colocate or server mode).

TRL keeps the vLLM weights in sync with the policy before each rollout; this sampler only turns a batch of
requests into one ``VLLMGeneration.generate`` call and cuts each row at its own stop condition and budget.
Logprobs are vLLM's sampling logprobs, as TRL's importance-sampling correction expects.

In server mode ``generate`` is a collective (prompts are gathered to rank 0), so every rank must call it the same
number of times per rollout.
"""

from __future__ import annotations

import contextlib

from .sampler import SampleRequest, _StopSpec
from .types import TokensWithLogprobs


class VLLMSampler:
    """Samples through ``trainer.vllm_generation``; see the module docstring."""

    def __init__(self, trainer):
        self.generation = trainer.vllm_generation
        self.tokenizer = trainer._tokenizer
        self.eos_token_id = self.tokenizer.eos_token_id

    def sample(self, requests: list[SampleRequest]) -> list[TokensWithLogprobs]:
        stops = [_StopSpec.of(r.stop, self.eos_token_id) for r in requests]
        stop_ids = sorted(set().union(*(s.token_ids for s in stops)))
        stop_strings = sorted(set().union(*(s.strings for s in stops)))
        max_tokens = max(r.max_tokens for r in requests)
        with _overridden(self.generation, max_tokens, stop_ids, stop_strings):
            _, completion_ids, logprobs, _ = self.generation.generate(
                prompts=[r.prompt for r in requests], images=None, num_generations=1)
        results = []
        for spec, r, tokens, lps in zip(stops, requests, completion_ids, logprobs):
            n, reason = spec.cut(list(tokens), r.max_tokens, self.tokenizer)
            flat = [float(lp[0]) if lp and lp[0] is not None else float("nan") for lp in lps[:n]]
            results.append(TokensWithLogprobs(list(tokens[:n]), flat, reason))
        return results


@contextlib.contextmanager
def _overridden(generation, max_tokens: int, stop_ids: list[int], stop_strings: list[str]):
    old_max, old_kwargs = generation.max_completion_length, generation.generation_kwargs
    kwargs = dict(old_kwargs or {})
    kwargs["stop_token_ids"] = sorted(set(kwargs.get("stop_token_ids") or []) | set(stop_ids))
    if stop_strings:
        kwargs["stop"] = sorted(set(kwargs.get("stop") or []) | set(stop_strings))
    generation.max_completion_length, generation.generation_kwargs = max_tokens, kwargs
    try:
        yield
    finally:
        generation.max_completion_length, generation.generation_kwargs = old_max, old_kwargs
