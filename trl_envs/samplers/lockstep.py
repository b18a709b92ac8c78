"""Keep every process making the same number of generation calls per rollout.

Under DeepSpeed ZeRO-3 (parameters gathered around every generation call), FSDP, or vLLM in server mode (prompts
gathered to rank 0), a generation call is a collective: if one rank's episodes end early and it stops calling, the
others hang. :class:`LockstepSampler` wraps a :class:`~trl_envs.samplers.base.Sampler` so that each call first agrees
across ranks that it happens, and :meth:`LockstepSampler.drain` lets a finished rank keep answering with dummy calls
until every rank is done. See docs/distributed.md.

Protocol, per rank: every :meth:`LockstepSampler.sample` call and every round of :meth:`LockstepSampler.drain` does
one ``all_reduce(MAX)`` of ``[working, number of requests]``. A rank in ``sample`` sends ``working=1``; a draining
rank sends ``0`` and, if the result says some rank is still working, makes one dummy call. The loop ends when every
rank is draining, so all ranks have made the same number of generation calls.

With ``equal_batch_sizes=True`` every call also carries the same number of requests on every rank (padded with dummy
requests whose results are dropped): TRL's vLLM server mode slices the gathered completions by
``process_index * len(prompts)``, which is only right when all ranks send equally many prompts, and so does colocated
vLLM with tensor parallelism inside its TP group.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..core.types import TokensWithLogprobs
from .base import Sampler, SampleRequest


class LockstepSampler:
    """A :class:`Sampler` whose calls happen on all ranks together (see the module docstring).

    Outside a ``torch.distributed`` job of two or more processes it is a plain pass-through.

    Args:
        sampler: the per-rank sampler (its calls may be collectives).
        dummy_prompt: token ids for the one-token dummy request a finished rank sends while others still sample.
        device: where the agreement tensor lives (the backend's device: CPU for gloo, the GPU for nccl).
        equal_batch_sizes: pad every call to the largest number of requests of any rank (vLLM server mode and
            tensor-parallel colocate need it); the dummy results are dropped.

    Attributes:
        num_calls, num_dummy_calls: calls made on this rank, and how many of them were dummies (drain calls).
        num_padding_requests: dummy requests added to real calls by ``equal_batch_sizes``.
    """

    def __init__(
        self,
        sampler: Sampler,
        dummy_prompt: list[int],
        device: torch.device | str = "cpu",
        *,
        equal_batch_sizes: bool = False,
    ):
        if not dummy_prompt:
            raise ValueError("LockstepSampler: dummy_prompt must hold at least one token")
        self.sampler = sampler
        self.dummy = SampleRequest(list(dummy_prompt), [], 1)
        self.device = torch.device(device)
        self.equal_batch_sizes = equal_batch_sizes
        self.num_calls = 0
        self.num_dummy_calls = 0
        self.num_padding_requests = 0

    @staticmethod
    def active() -> bool:
        return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1

    def _agree(self, working: bool, num_requests: int) -> tuple[bool, int]:
        """All ranks: is any rank still working, and the largest number of requests of this round."""
        state = torch.tensor([1 if working else 0, num_requests], dtype=torch.long, device=self.device)
        dist.all_reduce(state, op=dist.ReduceOp.MAX)
        any_working, width = state.tolist()
        return bool(any_working), int(width)

    def sample(self, requests: list[SampleRequest]) -> list[TokensWithLogprobs]:
        n = len(requests)
        if self.active():
            _, width = self._agree(True, n)
            if self.equal_batch_sizes and width > n:
                self.num_padding_requests += width - n
                requests = list(requests) + [self.dummy] * (width - n)
        self.num_calls += 1
        return self.sampler.sample(requests)[:n]

    def drain(self) -> None:
        """Call once this rank's rollouts are done: make dummy calls until no rank is still sampling."""
        if not self.active():
            return
        while True:
            any_working, width = self._agree(False, 0)
            if not any_working:
                return
            self.num_calls += 1
            self.num_dummy_calls += 1
            self.sampler.sample([self.dummy] * (max(width, 1) if self.equal_batch_sizes else 1))
