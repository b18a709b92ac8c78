"""The sampler protocol: what the rollout engine asks of anything that samples actions.

A :class:`Sampler` is synchronous and batched: the rollout engine (``trl_envs.rollout.engine``) collects the prompts of
all active episodes and hands them over in one call per turn, as :class:`SampleRequest` s. Implementations:
:class:`~trl_envs.samplers.hf.HFSampler` (``transformers`` ``generate``), :class:`~trl_envs.samplers.vllm.VLLMSampler`
(TRL's vLLM generation), :class:`~trl_envs.samplers.text_policy.TextPolicySampler` (a Python function).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..core.types import StopCondition, TokensWithLogprobs


@dataclass
class SampleRequest:
    """One prompt to sample from: its token ids, when to stop, and at most how many tokens to sample."""

    prompt: list[int]
    stop: StopCondition
    max_tokens: int


class Sampler(Protocol):
    """Samples one action per request, in request order.

    Contract: ``len(result) == len(requests)``; each result has ``1 <= len(tokens) <= max_tokens``, ends on the
    first stop token/string it produced (included) with ``finish_reason="stop"``, or has exactly ``max_tokens``
    tokens with ``finish_reason="length"``.
    """

    def sample(self, requests: list[SampleRequest]) -> list[TokensWithLogprobs]: ...


@dataclass
class StopSpec:
    """A request's stop condition split into token ids (EOS added) and strings, and where it cuts a sampled action.

    Samplers that generate past a row's stop (one batched call, shared settings) use :meth:`cut` to end each row at
    its own first stop token / string or budget, as the :class:`Sampler` contract requires.
    """

    token_ids: frozenset[int]
    strings: tuple[str, ...]

    @classmethod
    def of(cls, stop: StopCondition, eos_token_id: int | None) -> StopSpec:
        ids = {s for s in stop if isinstance(s, int)}
        strings = tuple(s for s in stop if isinstance(s, str))
        if len(ids) + len(strings) != len(stop):
            raise TypeError(f"stop condition must be a list of token ids or of strings, got {stop!r}")
        if eos_token_id is not None:
            ids.add(eos_token_id)
        return cls(frozenset(ids), strings)

    def cut(self, tokens: list[int], max_tokens: int, tokenizer) -> tuple[int, str]:
        """How many of ``tokens`` form the action, and why it ended."""
        limit = min(len(tokens), max_tokens)
        for k in range(limit):
            if tokens[k] in self.token_ids:
                return k + 1, "stop"
            if self.strings and self.text_hit(tokens[: k + 1], tokenizer):
                return k + 1, "stop"
        return limit, "length"

    def text_hit(self, tokens: list[int], tokenizer) -> bool:
        """Whether the decoded ``tokens`` contain one of the stop strings."""
        text = tokenizer.decode(tokens, skip_special_tokens=False)
        return any(s in text for s in self.strings)


__all__ = ["SampleRequest", "Sampler", "StopSpec"]
