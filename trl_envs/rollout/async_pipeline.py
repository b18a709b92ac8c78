"""The rollout side of asynchronous GRPO: a background thread that rolls out batches with a copy of the policy.

* :class:`SamplerWeights`: the sampler's copy of the policy's trainable parameters (frozen ones shared), refreshed
  from a staging buffer between ``generate`` calls; its version is the optimizer step it was taken at.
* :class:`ComputeTurn`: the device's compute taken in turns by the trainer and the sampler (the sampler first).
* :class:`VersionedSampler`: the sampler on that copy, recording each call's weight version per batch.
* :class:`RolloutPipeline`: a thread with its own event loop running every submitted :class:`RolloutJob` whose
  weights are ready, concurrently; :meth:`RolloutPipeline.take` hands a finished batch (or its error) to the trainer,
  :meth:`RolloutPipeline.close` cancels what runs and joins the thread. No collective call is ever made here.

The trainer side (what to submit, the staleness check, the correction) is
:mod:`trl_envs.trainers.async_rollouts`; docs/async.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.types import EnvGroupBuilder
from ..samplers.hf import HFSampler
from .engine import RolloutBatchResult, run_rollout_batch_async
from .event_loop import cyclic_gc_paused

THREAD_NAME = "trl_envs-async-rollouts"
JOIN_TIMEOUT_S = 60.0  # the running batches are cancelled first; an env that ignores cancellation gets this long
RESERVE_S = 0.1  # how long the trainer waits for a batch just started to make its first generate call

# -- the sampler's weights ---------------------------------------------------------------------------------------------


class SamplerWeights:
    """A copy of ``policy`` to sample with while ``policy`` trains, and the optimizer step its weights are from.

    Only trainable parameters are copied (frozen ones, a LoRA base model's, are shared with the policy: they never
    change); buffers are copied. :meth:`stage` (trainer thread) snapshots the policy's trainable parameters into a
    staging buffer; :meth:`apply` (sampler thread, between generate calls) moves a newer snapshot into the copy, so a
    generate call never sees weights change under it and the trainer never waits for one. Memory: two extra copies of
    the trainable parameters (the sampler's and the staging buffer).
    """

    def __init__(self, policy: torch.nn.Module, version: int):
        frozen = {id(p): p for p in policy.parameters() if not p.requires_grad}
        self.model = copy.deepcopy(policy, memo=dict(frozen))
        self.model.eval()
        names = [n for n, p in policy.named_parameters() if p.requires_grad]
        live = dict(policy.named_parameters())
        mine = dict(self.model.named_parameters())
        self._live = [live[n] for n in names]
        self._mine = [mine[n] for n in names]
        for p in self._mine:
            p.requires_grad_(False)
        self._staged = [p.detach().clone() for p in self._live]
        self._lock = threading.Lock()
        self.version = version
        self.staged_version = version

    @property
    def num_copied_parameters(self) -> int:
        return sum(p.numel() for p in self._mine)

    def stage(self, version: int) -> None:
        """Snapshot the policy's trainable weights as ``version`` (call from the training thread, between steps)."""
        with self._lock, torch.no_grad():
            torch._foreach_copy_(self._staged, [p.detach() for p in self._live])
            self.staged_version = version

    def apply(self) -> int:
        """Load the latest snapshot into the sampling copy if it is newer; return the copy's version."""
        with self._lock:
            if self.staged_version != self.version:
                with torch.no_grad():
                    torch._foreach_copy_(self._mine, self._staged)
                self.version = self.staged_version
            return self.version


class ComputeTurn:
    """The device's compute, taken in turns by the trainer (a whole ``training_step``: scoring, forward, backward) and
    the sampler (one ``generate`` call), the sampler first: a waiting or announced (:meth:`reserve`) ``generate`` call
    goes before the trainer's next step. What overlaps is everything else: env time (tool calls, judges, env servers)
    runs while the trainer computes. Both sides computing at once on one device is slower than taking turns
    (docs/async.md). The sampler is at most ``max_staleness`` batches ahead,
    so its priority cannot starve the trainer."""

    def __init__(self):
        self._cond = threading.Condition()
        self._holder: int | None = None
        self._sampler_waiting = 0
        self._reserved_until = 0.0

    def reserve(self) -> None:
        """Announce that the sampler is about to start a batch: the trainer lets it generate first (for at most
        :data:`RESERVE_S`, in case the batch's envs take long to set up)."""
        with self._cond:
            self._reserved_until = time.perf_counter() + RESERVE_S

    def unreserve(self) -> None:
        with self._cond:
            self._reserved_until = 0.0
            self._cond.notify_all()

    @contextlib.contextmanager
    def sampler(self) -> Iterator[None]:
        with self._cond:
            self._sampler_waiting += 1
            try:
                while self._holder is not None:
                    self._cond.wait()
            finally:
                self._sampler_waiting -= 1
            self._holder, self._reserved_until = threading.get_ident(), 0.0
        try:
            yield
        finally:
            self._release()

    @contextlib.contextmanager
    def trainer(self) -> Iterator[None]:
        self._trainer_acquire()
        try:
            yield
        finally:
            self._release()

    @contextlib.contextmanager
    def yielded(self) -> Iterator[None]:
        """Let the sampler compute while this thread waits (a no-op where this thread does not hold the turn)."""
        if self._holder != threading.get_ident():
            yield
            return
        self._release()
        try:
            yield
        finally:
            self._trainer_acquire()

    def let_sampler_in(self) -> None:
        """If a ``generate`` call is waiting, let it run now (the trainer holding the turn calls this between its
        forward and backward pass, so a batch in flight is not held up by a whole training step)."""
        if self._holder == threading.get_ident() and self._sampler_waiting:
            self._release()
            self._trainer_acquire()

    def _trainer_acquire(self) -> None:
        with self._cond:
            while self._holder is not None or self._sampler_waiting or time.perf_counter() < self._reserved_until:
                self._cond.wait(0.01)  # timed: a reservation expires
            self._holder = threading.get_ident()

    def _release(self) -> None:
        with self._cond:
            self._holder = None
            self._cond.notify_all()


class VersionedSampler:
    """A :class:`~trl_envs.samplers.base.Sampler` on :class:`SamplerWeights`: each call takes its
    :class:`ComputeTurn`, first loads the newest staged weights, and records their version in the calling batch's
    list (:meth:`for_batch`)."""

    def __init__(self, sampler: HFSampler, weights: SamplerWeights, turn: ComputeTurn):
        self.sampler, self.weights, self.turn = sampler, weights, turn
        self._lock = threading.Lock()  # a call forced by the batcher's valve may come from another thread

    def sample(self, requests, versions: list[int] | None = None):
        with self._lock, self.turn.sampler():
            version = self.weights.apply()
            if versions is not None:
                versions.append(version)
            return self.sampler.sample(requests)

    def for_batch(self, versions: list[int]):
        """A sampler for one batch that records the weight version of each of its calls in ``versions``."""
        return _BatchSampler(self, versions)


class _BatchSampler:
    def __init__(self, sampler: VersionedSampler, versions: list[int]):
        self._sampler, self._versions = sampler, versions

    def sample(self, requests):
        return self._sampler.sample(requests, self._versions)


# -- the pipeline ------------------------------------------------------------------------------------------------------


@dataclass
class RolloutJob:
    """One generation batch to roll out: its group keys and builders, and the oldest weights it may sample with."""

    index: int
    keys: list[str]
    builders: list[EnvGroupBuilder]
    min_version: int


@dataclass
class ReadyBatch:
    """A finished job: the rollout (or the error it raised) and the weight versions it sampled with."""

    job: RolloutJob
    result: RolloutBatchResult | None = None
    error: BaseException | None = None
    versions: list[int] = field(default_factory=list)
    sampler_wait_s: float = 0.0

    @property
    def oldest_version(self) -> int:
        return min(self.versions) if self.versions else self.job.min_version


class RolloutPipeline:
    """Runs :class:`RolloutJob` s on a background thread with its own event loop: every submitted job whose weights
    are ready (``staged_version >= job.min_version``) starts at once, so the env waits of consecutive batches overlap
    too; their ``generate`` calls take turns (:class:`VersionedSampler`).

    Args:
        sampler: the :class:`VersionedSampler` every batch samples with.
        rollout_kwargs: budget, strategy and max_wait_s of :func:`~trl_envs.rollout.engine.run_rollout_batch_async`.
    """

    def __init__(self, sampler: VersionedSampler, rollout_kwargs: dict[str, Any]):
        self.sampler = sampler
        self.rollout_kwargs = rollout_kwargs
        self._cond = threading.Condition()
        self._jobs: list[RolloutJob] = []
        self._ready: dict[int, ReadyBatch] = {}
        self._stop = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._crash: BaseException | None = None
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), name=THREAD_NAME, daemon=True)
        self.thread.start()
        started.wait()

    # trainer side
    def submit(self, job: RolloutJob) -> None:
        with self._cond:
            self._jobs.append(job)
        self._poke()

    def weights_changed(self) -> None:
        self._poke()

    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(wake.set)

    def take(self, index: int) -> ReadyBatch:
        """Block until job ``index`` is done; re-raise its error (or the thread's) in the caller."""
        with self._cond:
            while index not in self._ready:
                if self._crash is not None:
                    raise RuntimeError(f"{THREAD_NAME} stopped unexpectedly") from self._crash
                if self._stop or not self.thread.is_alive():
                    raise RuntimeError(f"{THREAD_NAME} is stopped; batch {index} will not be rolled out")
                self._cond.wait(0.1)  # a timed wait: Ctrl-C reaches the trainer thread promptly
            ready = self._ready.pop(index)
        if ready.error is not None:
            raise ready.error
        return ready

    def close(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Stop: cancel the running batches (their envs are cleaned up), drop queued jobs, join the thread."""
        with self._cond:
            self._stop = True
            self._jobs.clear()
            self._cond.notify_all()
        self._poke()
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            warnings.warn(
                f"{THREAD_NAME} did not stop within {timeout_s:.0f} s of being cancelled: an env or sampler "
                "call is blocking and ignores cancellation. It is a daemon thread and ends with the process.",
                stacklevel=2,
            )

    # sampler-thread side
    def _run(self, started: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop, self._wake = loop, asyncio.Event()
        started.set()
        try:
            loop.run_until_complete(self._main())
        except BaseException as crash:  # noqa: BLE001
            with self._cond:
                self._crash = crash
                self._cond.notify_all()
        finally:
            self._loop = None
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self.sampler.turn.unreserve()

    async def _main(self) -> None:
        running: set[asyncio.Task] = set()
        idle_since = [time.perf_counter()]  # when the last running batch ended: the sampler's idle time starts

        def finished(task: asyncio.Task) -> None:
            running.discard(task)
            if not running:
                idle_since[0] = time.perf_counter()
            self._wake.set()

        try:
            while True:
                with self._cond:
                    if self._stop:
                        return
                    startable = []
                    while self._jobs and self.sampler.weights.staged_version >= self._jobs[0].min_version:
                        startable.append(self._jobs.pop(0))
                for job in startable:
                    waited = 0.0 if running else time.perf_counter() - idle_since[0]
                    self.sampler.turn.reserve()  # its first generate call goes before the trainer's next step
                    task = asyncio.ensure_future(self._one(job, waited))
                    running.add(task)
                    task.add_done_callback(finished)
                await self._wake.wait()
                self._wake.clear()
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _one(self, job: RolloutJob, sampler_wait_s: float) -> None:
        ready = ReadyBatch(job, sampler_wait_s=sampler_wait_s)
        try:
            with cyclic_gc_paused():  # while a batch runs, as in the synchronous rollout (see cyclic_gc_paused)
                ready.result = await run_rollout_batch_async(
                    job.builders, self.sampler.for_batch(ready.versions), **self.rollout_kwargs
                )
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # noqa: BLE001 - delivered to the trainer thread by take()
            ready.error = error
        with self._cond:
            self._ready[job.index] = ready
            self._cond.notify_all()


__all__ = [
    "THREAD_NAME",
    "ComputeTurn",
    "ReadyBatch",
    "RolloutJob",
    "RolloutPipeline",
    "SamplerWeights",
    "VersionedSampler",
]
