"""One batched sampler call per turn for many concurrent episodes.

Every episode of a rollout batch runs as its own coroutine and asks for its next action with
``await batcher.sample(...)``. :class:`BatchingPolicy` holds those requests until every live episode is either
waiting for an action or finished, then sends them all to the synchronous :class:`~trl_envs.samplers.base.Sampler` in
ONE call. Envs that take a while (I/O, grading) therefore cost their latency once per turn, not once per episode.

Where the call runs: a complete batch (every live episode asked) is sampled right on the event loop's thread, the
caller's (a trainer's) own thread: no episode of the batch could run meanwhile anyway, and a hand-off to a worker
thread and back costs two thread wake-ups per call, each a scheduling delay on a loaded CPU (issue 17), and moves
torch work off the caller's thread. Work outside the batch's episodes (a finished group's grading I/O) waits for
that call. A call forced by the ``max_wait_s`` valve (some episode is still busy in env code) runs in a reused
worker thread (``event_loop.run_blocking``), so that episode keeps running meanwhile; ``sample_on_loop_thread=False``
sends every call there. The watchdog (``trl_envs.rollout.watchdog``) knows a sampler call on the loop thread
(:func:`call_sampler`) is not an env blocking the loop.

``max_wait_s`` is a safety valve: if some live episode does not ask for an action within that many seconds
after the first pending request (an env stuck in a long step), the requests already pending are sent without it.

Envs that wait on a sibling (the players of one game taking turns) say so with :func:`parked`: while an episode is
inside ``async with parked():`` the batcher does not wait for it, so a turn-taking game runs at full speed instead
of stalling ``max_wait_s`` per move.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from .event_loop import run_blocking
from ..samplers.base import SampleRequest, Sampler
from ..core.types import StopCondition, TokensWithLogprobs


_current_batcher: contextvars.ContextVar[BatchingPolicy | None] = contextvars.ContextVar(
    "trl_envs_current_batcher", default=None)
"""The batcher whose :meth:`BatchingPolicy.episode` the calling coroutine is inside (``None`` elsewhere)."""

rollout_clock: contextvars.ContextVar[Any] = contextvars.ContextVar("trl_envs_rollout_clock", default=None)
"""The per-rollout timeout clock of the calling episode (set by ``trl_envs.rollout.engine`` under ``RetryOnFailure``), with
``pause()`` / ``resume()``. It is paused while the episode's request waits for other episodes to join the batch: a
rollout's timeout covers its own env, model and grading time, not time spent waiting on a stuck sibling."""


class ParkedSlot:
    """An episode parked in a :class:`BatchingPolicy` (see :func:`parked`). :meth:`unpark` is idempotent."""

    def __init__(self, batcher: BatchingPolicy | None, clock: Any = None):
        self._batcher, self._clock = batcher, clock
        if batcher is not None:
            batcher._parked += 1
        if clock is not None:
            clock.pause()

    def unpark(self) -> None:
        """Count the episode as live again: the batcher waits for its next request. Call it from the code that wakes
        the episode, at the moment it does, so a sampling call cannot go out in between without it."""
        batcher, self._batcher = self._batcher, None
        if batcher is not None:
            batcher._parked -= 1
            if self._clock is not None:
                self._clock.resume()


class _EpisodeScope:
    """``BatchingPolicy.episode()``: joins the batcher and makes it the calling episode's current one on entry, and
    undoes both on exit. A plain class, not ``contextlib.asynccontextmanager``: one is entered per episode, and the
    generator machinery of the latter costs several times more than the work itself."""

    __slots__ = ("_batcher", "_token")

    def __init__(self, batcher: BatchingPolicy):
        self._batcher = batcher
        self._token: contextvars.Token | None = None

    async def __aenter__(self) -> None:
        self._batcher.join()
        self._token = _current_batcher.set(self._batcher)

    async def __aexit__(self, *exc: Any) -> None:
        _current_batcher.reset(self._token)
        self._batcher.leave()


@dataclass
class _Pending:
    request: SampleRequest
    future: asyncio.Future
    clock: Any = None


class BatchingPolicy:
    """A per-episode async policy (a :class:`~trl_envs.rollout.engine.TokenPolicy`) in front of a batched
    :class:`Sampler`: each episode awaits its action, and the requests of all live episodes go to the sampler in one
    call (see the module docstring). It is not itself a ``Sampler``; formerly named ``BatchingSampler`` (still an
    alias).

    Args:
        sampler: the batched sampler.
        max_wait_s: the valve (module docstring); ``None``: wait for every live episode, however long.
        sample_on_loop_thread: call the sampler on the loop's own thread when every live episode asked (the default;
            module docstring); ``False``: always in a worker thread, so that coroutines outside the batch's
            episodes keep running during every call.

    Attributes:
        num_calls: how many times the underlying sampler was called.
        batch_sizes: the number of requests of each call.
        sampler_seconds: wall time spent inside the underlying sampler.
        num_valve_flushes: how many calls the ``max_wait_s`` valve forced (some live episode had not asked);
            0 in a healthy run, turn-taking games included.
        num_loop_thread_calls: how many calls ran on the loop's thread (the others ran in a worker thread).
    """

    def __init__(self, sampler: Sampler, *, max_wait_s: float | None = 30.0, sample_on_loop_thread: bool = True):
        self.sampler = sampler
        self.max_wait_s = max_wait_s
        self.sample_on_loop_thread = sample_on_loop_thread
        self._live = 0
        self._parked = 0
        self._pending: list[_Pending] = []
        self._busy = False
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight: set[asyncio.Task] = set()
        self.num_calls = 0
        self.batch_sizes: list[int] = []
        self.sampler_seconds = 0.0
        self.num_valve_flushes = 0
        self.num_loop_thread_calls = 0

    def episode(self) -> _EpisodeScope:
        """Scope of one live episode (``async with batcher.episode():``): the batcher waits for it before each call
        while it is inside (and not :func:`parked`)."""
        return _EpisodeScope(self)

    @contextlib.asynccontextmanager
    async def parked(self) -> AsyncIterator[ParkedSlot]:
        """Scope in which the calling episode waits on a sibling and must not be waited for (see :func:`parked`)."""
        slot = ParkedSlot(self, rollout_clock.get())
        try:
            self._maybe_flush()  # the others may be all we were waiting for
            yield slot
        finally:
            slot.unpark()

    def join(self) -> None:
        """Count one more participant to wait for (an episode, or a group still making its envs)."""
        self._live += 1

    def leave(self) -> None:
        """Stop waiting for one participant; may send the pending requests."""
        self._live -= 1
        self._maybe_flush()

    async def sample(self, prompt: list[int], stop: StopCondition, max_tokens: int) -> TokensWithLogprobs:
        """Sample one action for ``prompt``; resolves when the batch this request joined has been sampled."""
        future = asyncio.get_running_loop().create_future()
        clock = rollout_clock.get()
        if clock is not None:
            clock.pause()
        self._pending.append(_Pending(SampleRequest(list(prompt), list(stop), max_tokens), future, clock))
        if self.max_wait_s is not None and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.max_wait_s, self._maybe_flush, True)
        self._maybe_flush()
        return await future

    __call__ = sample

    async def wait_idle(self) -> None:
        """Wait for the sampler calls still running (their results are dropped). A batch that ends early (an error)
        must not leave ``generate`` running in a worker thread while the caller goes on to train the model."""
        while self._in_flight:
            await asyncio.gather(*list(self._in_flight), return_exceptions=True)

    def _maybe_flush(self, force: bool = False) -> None:
        if force:
            self._timer = None
        waiting_for = self._live - self._parked
        if self._busy or (not force and len(self._pending) < waiting_for):
            return  # checked before the O(n) sweep below: dropping cancelled requests only shortens the list
        self._pending = [p for p in self._pending if not p.future.done()]  # drop cancelled episodes' requests
        if not self._pending or (not force and len(self._pending) < waiting_for):
            return
        valve = force and len(self._pending) < waiting_for
        if valve:
            self.num_valve_flushes += 1
        batch, self._pending = self._pending, []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._busy = True
        for p in batch:
            if p.clock is not None:
                p.clock.resume()
        on_loop_thread = self.sample_on_loop_thread and not valve  # the valve: some episode is still busy
        task = asyncio.get_running_loop().create_task(self._run(batch, on_loop_thread))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _run(self, batch: list[_Pending], on_loop_thread: bool) -> None:
        try:
            requests = [p.request for p in batch]
            start = time.perf_counter()
            if on_loop_thread:
                self.num_loop_thread_calls += 1
                results = call_sampler(self.sampler, requests)
            else:
                results = await run_blocking(call_sampler, self.sampler, requests)
            self.sampler_seconds += time.perf_counter() - start
            self.num_calls += 1
            self.batch_sizes.append(len(batch))
            if len(results) != len(batch):
                raise RuntimeError(f"BatchingPolicy: {type(self.sampler).__name__}.sample returned {len(results)} "
                                   f"results for {len(batch)} requests; a Sampler returns one per request, in order")
            for p, r in zip(batch, results):
                if not p.future.done():
                    p.future.set_result(r)
        except BaseException as e:  # noqa: BLE001 - every waiting episode must hear about it
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(e)
            if not isinstance(e, Exception):
                raise
        finally:
            self._busy = False
            if self._pending and self.max_wait_s is not None and self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(self.max_wait_s, self._maybe_flush, True)
            self._maybe_flush()


def call_sampler(sampler: Sampler, requests: list[SampleRequest]) -> list[TokensWithLogprobs]:
    """``sampler.sample(requests)``: every call a :class:`BatchingPolicy` makes goes through here, so that the
    watchdog, finding this function on the loop thread's stack, knows the loop is busy sampling, not blocked by an
    env."""
    return sampler.sample(requests)


@contextlib.asynccontextmanager
async def parked() -> AsyncIterator[ParkedSlot]:
    """Wrap an env's wait on a sibling env of its group::

        async with parked() as slot:
            self.waiters.append(slot)         # the sibling calls slot.unpark() when it wakes us
            await asyncio.wait_for(event.wait(), timeout)

    While parked, the :class:`BatchingPolicy` running the calling episode samples the other episodes without
    waiting for this one, and the episode's ``RetryOnFailure`` timeout clock is paused (the wait is the sibling's
    time, not this rollout's). The code that wakes the episode should call ``slot.unpark()`` right then (leaving the
    block does it too, but later: a sampling call could go out in between, without the woken episode's request).
    Bound the wait itself so a sibling that died cannot keep the episode here forever. Outside a batcher's
    episode (a plain policy, a test) it does nothing.
    """
    batcher = _current_batcher.get()
    if batcher is None:
        yield ParkedSlot(None)
        return
    async with batcher.parked() as slot:
        yield slot


BatchingSampler = BatchingPolicy
"""The former name of :class:`BatchingPolicy`, kept importable."""
