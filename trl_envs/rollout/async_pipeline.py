"""The rollout side of asynchronous GRPO: a background thread that rolls out batches, sampling with a copy of the
policy in a child process (:class:`~trl_envs.samplers.process.SamplerProcess`) while the trainer trains.

* :class:`VersionedSampler`: the sampler process, recording each call's weight version per batch.
* :class:`RolloutPipeline`: a thread with its own event loop running every submitted :class:`RolloutJob` whose
  weights are ready, concurrently; :meth:`RolloutPipeline.take` hands a finished batch (or its error) to the trainer,
  :meth:`RolloutPipeline.close` cancels what runs and joins the thread. No collective call is ever made here.

The trainer side (what to submit, the staleness check, the correction) is
:mod:`trl_envs.trainers.async_rollouts`; docs/async.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from ..core.types import EnvGroupBuilder
from ..samplers.process import SamplerProcess
from .engine import RolloutBatchResult, run_rollout_batch_async
from .event_loop import cyclic_gc_paused

THREAD_NAME = "trl_envs-async-rollouts"
JOIN_TIMEOUT_S = 60.0  # the running batches are cancelled first; an env that ignores cancellation gets this long

# -- the sampler -------------------------------------------------------------------------------------------------------


class VersionedSampler:
    """A :class:`~trl_envs.samplers.base.Sampler` on a :class:`~trl_envs.samplers.process.SamplerProcess` that records
    the weight version of each call in the calling batch's list (:meth:`for_batch`)."""

    def __init__(self, process: SamplerProcess):
        self.process = process

    def sample(self, requests, versions: list[int] | None = None):
        version, results = self.process.sample_with_version(requests)
        if versions is not None:
            versions.append(version)
        return results

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
    """One generation batch to roll out: its group keys (the trainer's, compared but never read here) and builders,
    and the oldest weights it may sample with."""

    index: int
    keys: list[Any]
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
    too; their ``generate`` calls go to the sampler process one at a time, from worker threads (so the loop keeps
    running envs meanwhile).

    Args:
        sampler: the :class:`VersionedSampler` every batch samples with.
        rollout_kwargs: keyword arguments of :func:`~trl_envs.rollout.engine.run_rollout_batch_async` (budget,
            strategy, max_wait_s, sample_on_loop_thread).
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

    def cancel(self) -> None:
        """Start stopping, without waiting: drop queued jobs and cancel the running batches (their envs are cleaned
        up). A ``generate`` call in flight still holds its batch until the sampler answers or is stopped."""
        with self._cond:
            self._stop = True
            self._jobs.clear()
            self._cond.notify_all()
        self._poke()

    def close(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Stop: :meth:`cancel`, then join the thread (a warning names it if it is still running after
        ``timeout_s``)."""
        self.cancel()
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
                    while self._jobs and self.sampler.process.staged_version >= self._jobs[0].min_version:
                        startable.append(self._jobs.pop(0))
                for job in startable:
                    waited = 0.0 if running else time.perf_counter() - idle_since[0]
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
    "ReadyBatch",
    "RolloutJob",
    "RolloutPipeline",
    "VersionedSampler",
]
