"""A :class:`~trl_envs.samplers.base.Sampler` over TRL's vLLM generation (``use_vllm=True``, colocate or server mode).

TRL keeps the vLLM weights in sync with the policy before each rollout; this sampler only turns a batch of
requests into one ``VLLMGeneration.generate`` call and cuts each row at its own stop condition and budget.
Logprobs are vLLM's sampling logprobs of the sampled tokens, as TRL's importance-sampling correction expects.

In server mode ``generate`` is a collective: every rank's prompts are gathered to rank 0, which sends them to the
server with ITS sampling settings, and each rank keeps the slice ``process_index * len(prompts)`` of the answers.
So, per call, (1) every rank must call (the trainer wraps this sampler in
:class:`~trl_envs.samplers.lockstep.LockstepSampler`), (2) every rank must send equally many prompts
(``LockstepSampler``'s ``equal_batch_sizes``), and (3) rank 0's settings must cover every rank's requests: this sampler
agrees across ranks on the largest token budget and the union of stop tokens / strings before calling (otherwise a
finished rank's one-token dummy call would cut every other rank's completions to one token). Colocated vLLM with tensor
parallelism (``vllm_tensor_parallel_size > 1``) gathers the prompts of its TP group and runs one generation for them:
the same three rules apply there.
"""

from __future__ import annotations

import contextlib
import math

import torch.distributed as dist

from ..core.types import TokensWithLogprobs
from .base import SampleRequest, StopSpec


class VLLMSampler:
    """Samples through TRL's vLLM generation; see the module docstring.

    Args:
        generation: TRL's ``VLLMGeneration`` (a ``GRPOTrainer``'s ``vllm_generation``): its ``generate(prompts=...,
            images=None, num_generations=1)`` is called once per :meth:`sample`, with its ``max_completion_length``
            and ``generation_kwargs`` (stop tokens and strings) set for that call and restored afterwards; ``mode``
            and ``tensor_parallel_size`` say whether ranks share one call's settings.
        tokenizer: the policy's tokenizer (its ``eos_token_id`` ends every request; stop strings are matched on
            its ``decode``).
    """

    def __init__(self, generation, tokenizer):
        self.generation = generation
        self.tokenizer = tokenizer
        self.eos_token_id = tokenizer.eos_token_id

    @property
    def shares_sampling_settings(self) -> bool:
        """Whether one rank's sampling settings apply to other ranks' prompts: server mode (rank 0 sends everyone's
        prompts) and colocate with tensor parallelism (the TP group runs one generation over its gathered prompts)."""
        return (
            getattr(self.generation, "mode", None) == "server"
            or (getattr(self.generation, "tensor_parallel_size", 1) or 1) > 1
        )

    def sample(self, requests: list[SampleRequest]) -> list[TokensWithLogprobs]:
        if not requests:
            return []
        stops = [StopSpec.of(r.stop, self.eos_token_id) for r in requests]
        stop_ids = sorted(set().union(*(s.token_ids for s in stops)))
        stop_strings = sorted(set().union(*(s.strings for s in stops)))
        max_tokens = max(r.max_tokens for r in requests)
        if self.shares_sampling_settings:
            max_tokens, stop_ids, stop_strings = agree_sampling_settings(max_tokens, stop_ids, stop_strings)
        with _overridden(self.generation, max_tokens, stop_ids, stop_strings):
            _, completion_ids, logprobs, logprob_token_ids = self.generation.generate(
                prompts=[r.prompt for r in requests], images=None, num_generations=1
            )
        if len(completion_ids) != len(requests):
            raise RuntimeError(
                f"VLLMSampler: vLLM returned {len(completion_ids)} completions for {len(requests)} "
                "prompts (in server mode every rank must send equally many prompts per call)"
            )
        results = []
        for i, (spec, r, tokens) in enumerate(zip(stops, requests, completion_ids)):
            tokens = list(tokens)
            n, reason = spec.cut(tokens, r.max_tokens, self.tokenizer)
            if logprobs is None:
                flat = [0.0] * n
            else:
                ids = logprob_token_ids[i] if logprob_token_ids is not None else None
                flat = [
                    sampled_logprob(logprobs[i][t], ids[t] if ids is not None else None, tokens[t]) for t in range(n)
                ]
            results.append(TokensWithLogprobs(tokens[:n], flat, reason))
        return results


def sampled_logprob(position_logprobs, position_token_ids, token: int) -> float:
    """The logprob of the sampled ``token`` at one position of vLLM's output (TRL's format: the values, sorted by
    rank, and their token ids). With ``logprobs=0`` (TRL's setting) the only entry is the sampled token; with more,
    the sampled token need not be the first, so it is looked up by id. ``None`` (a NaN from vLLM) becomes NaN,
    which TRL's importance-sampling correction ignores."""
    value = None
    if position_logprobs:
        value = position_logprobs[0]
        if position_token_ids is not None and token in position_token_ids:
            value = position_logprobs[list(position_token_ids).index(token)]
    return float("nan") if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def agree_sampling_settings(
    max_tokens: int, stop_ids: list[int], stop_strings: list[str]
) -> tuple[int, list[int], list[str]]:
    """Across ranks (a collective when ``torch.distributed`` runs with several processes): the largest token budget
    and the union of stop tokens and stop strings."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return max_tokens, stop_ids, stop_strings
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (max_tokens, list(stop_ids), list(stop_strings)))
    return (
        max(g[0] for g in gathered),
        sorted(set().union(*(g[1] for g in gathered))),
        sorted(set().union(*(g[2] for g in gathered))),
    )


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
