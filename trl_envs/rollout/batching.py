"""One batched sampler call per turn for many concurrent episodes.

Every episode of a rollout batch runs as its own coroutine and asks for its next action with
``await batcher.sample(...)``. :class:`BatchingPolicy` holds those requests and sends them all to the synchronous
:class:`~trl_envs.samplers.base.Sampler` in ONE call as soon as no episode that has not asked can still make progress
on its own:

* every live episode asked (or is :func:`parked`, or finished); or
* the event loop is quiet apart from the pending requests: every episode that has not asked is blocked on something
  only a sampled action can release (a sibling's move, an ``asyncio.Condition``), with no coroutine ready to run, no
  sleep or other timer, no socket and no worker-thread call (``asyncio.to_thread``) in flight
  (``trl_envs.rollout.loop_idle`` says which; those are episodes at work, and are waited for). No help from the env is
  needed: a cookbook two-player game runs at full speed. Counted in ``num_idle_flushes``.

Envs that take a while (I/O, grading) therefore cost their latency once per turn, not once per episode.

A streaming sampler (one with ``submit(request) -> concurrent.futures.Future``, e.g.
:class:`~trl_envs.samplers.continuous.ContinuousBatchingSampler` inside its session) is not batched by turn: each
request of the policy goes to it as soon as its episode asks, and the sampler batches the requests in flight itself, so
an episode's next turn does not wait for the slowest episode of the turn. Each such request counts as one call of one
request; ``sampler_seconds`` is then the time during which at least one request was in flight.

Requests may name another sampler (``sample(..., sampler=frozen)``: an opponent, an answerer or a judge model that is
not the policy being trained); each sampler gets one call per flush with all of its requests. Requests made by env
code through :func:`current_batcher` (``trl_envs.tinker.SamplerMessageCompleter``, ``ModelJudge``) join the batch of
the episode that made them.

Where the call runs: a batch sent because no episode could run meanwhile is sampled right on the event loop's thread,
the caller's (a trainer's) own thread: a hand-off to a worker thread and back costs two thread wake-ups per call,
each a scheduling delay on a loaded CPU, and moves torch work off the caller's thread. A call forced by the
``max_wait_s`` valve (some episode is still busy in env code) runs in a reused worker thread
(``event_loop.run_blocking``), so that episode keeps running meanwhile; ``sample_on_loop_thread=False`` sends every call
there. The watchdog (``trl_envs.rollout.watchdog``) knows a sampler call on the loop thread (:func:`call_sampler`) is
not an env blocking the loop.

``max_wait_s`` is a safety valve: if some live episode does not ask for an action within that many seconds after the
first pending request (an env stuck in a long step, or a wait the loop cannot see), the requests already pending are
sent without it.

:func:`parked` stays as an explicit hint: an episode inside ``async with parked():`` is not waited for, whatever the
loop is doing (and its ``RetryOnFailure`` clock stops).

The batcher also ends episodes left waiting on a sibling that stopped early, and fails groups that stop making
progress (``trl_envs.rollout.coupling``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from ..core.types import StopCondition, TokensWithLogprobs
from ..samplers.base import Sampler, SampleRequest
from .coupling import EpisodeState, GroupStalledError, current_links, describe
from .event_loop import blocking_calls_in_flight, run_blocking
from .loop_idle import loop_activity, register_quiet_timer

logger = logging.getLogger(__name__)

_current_batcher: contextvars.ContextVar[BatchingPolicy | None] = contextvars.ContextVar(
    "trl_envs_current_batcher", default=None
)
"""The batcher of the rollout batch the calling coroutine belongs to (``None`` outside one)."""

_current_episode: contextvars.ContextVar[EpisodeState | None] = contextvars.ContextVar(
    "trl_envs_current_episode", default=None
)
"""The episode (:meth:`BatchingPolicy.episode`) the calling coroutine is inside (``None`` elsewhere)."""

rollout_clock: contextvars.ContextVar[Any] = contextvars.ContextVar("trl_envs_rollout_clock", default=None)
"""The per-rollout timeout clock of the calling episode (set by ``trl_envs.rollout.engine`` under ``RetryOnFailure``),
with ``pause()`` / ``resume()``. It is paused while the episode's request waits for other episodes to join the batch: a
rollout's timeout covers its own env, model and grading time, not time spent waiting on a stuck sibling."""


def current_batcher() -> BatchingPolicy | None:
    """The :class:`BatchingPolicy` running the calling coroutine's rollout batch, or ``None`` outside one. Env code
    that samples a model (an opponent, an answerer, a judge) sends its requests there, with ``sampler=`` naming the
    model, so that all envs asking in the same turn share one sampler call."""
    return _current_batcher.get()


class ParkedSlot:
    """An episode parked in a :class:`BatchingPolicy` (see :func:`parked`). :meth:`unpark` is idempotent."""

    def __init__(self, batcher: BatchingPolicy | None, clock: Any = None, episode: EpisodeState | None = None):
        self._batcher, self._clock, self._episode = batcher, clock, episode
        if batcher is not None:
            batcher._parked += 1
            if episode is not None:
                episode.parked += 1
        if clock is not None:
            clock.pause()

    def unpark(self) -> None:
        """Count the episode as live again: the batcher waits for its next request. Call it from the code that wakes
        the episode, at the moment it does, so a sampling call cannot go out in between without it."""
        batcher, self._batcher = self._batcher, None
        if batcher is not None:
            batcher._parked -= 1
            if self._episode is not None:
                self._episode.parked -= 1
                self._episode.last_progress = batcher._time()
            if self._clock is not None:
                self._clock.resume()


class _EpisodeScope:
    """``BatchingPolicy.episode()``: joins the batcher and makes it (and the episode) the calling coroutine's current
    ones on entry; undoes both on exit. A plain class, not ``contextlib.asynccontextmanager``: one is entered per
    episode, and the generator machinery of the latter costs several times more than the work itself."""

    __slots__ = ("_batcher", "_tokens", "state")

    def __init__(self, batcher: BatchingPolicy):
        self._batcher = batcher
        self._tokens: tuple[contextvars.Token, contextvars.Token] | None = None
        self.state: EpisodeState | None = None

    async def __aenter__(self) -> EpisodeState:
        batcher = self._batcher
        state = EpisodeState(asyncio.current_task(), current_links.get(), batcher._time())
        batcher.join()
        batcher._episodes.add(state)
        batcher._watch_stalls()
        self.state = state
        self._tokens = (_current_batcher.set(batcher), _current_episode.set(state))
        return state

    async def __aexit__(self, *exc: Any) -> None:
        _current_episode.reset(self._tokens[1])
        _current_batcher.reset(self._tokens[0])
        self._batcher._episodes.discard(self.state)
        self._batcher.leave()


@dataclass
class _Pending:
    request: SampleRequest
    future: asyncio.Future
    clock: Any = None
    episode: EpisodeState | None = None
    sampler: Sampler | None = None
    taken: bool = False  # sent, or withdrawn (its episode was cancelled): no longer counted as asking


class BatchingPolicy:
    """A per-episode async policy (a :class:`~trl_envs.rollout.engine.TokenPolicy`) in front of a batched
    :class:`Sampler`: each episode awaits its action, and the requests of all live episodes go to the sampler in one
    call (see the module docstring). It is not itself a ``Sampler``.

    Args:
        sampler: the batched sampler (the policy).
        max_wait_s: the valve (module docstring); ``None``: no valve.
        sample_on_loop_thread: call the sampler on the loop's own thread when no episode could run meanwhile (the
            default; module docstring); ``False``: always in a worker thread, so that coroutines outside the batch's
            episodes keep running during every call.
        group_stall_timeout_s: fail a group none of whose live episodes asked for or got an action for this long
            (``trl_envs.rollout.coupling``); ``None``: never.

    Attributes:
        num_calls: how many times the samplers were called (the policy's and any other named by requests).
        batch_sizes: the number of requests of each call.
        sampler_seconds: wall time spent inside the samplers.
        num_valve_flushes: how many flushes the ``max_wait_s`` valve forced (some live episode had not asked and the
            loop was not quiet); 0 in a healthy run, turn-taking games included.
        num_idle_flushes: how many flushes went out because the loop was quiet while some live episode had not asked
            (it was blocked on a sibling).
        num_loop_thread_calls: how many calls ran on the loop's thread (the others ran in a worker thread).
        num_sibling_endings: episodes ended because a sibling they waited on stopped early.
        num_stalled_groups: groups failed by ``group_stall_timeout_s``.
    """

    def __init__(
        self,
        sampler: Sampler,
        *,
        max_wait_s: float | None = 30.0,
        sample_on_loop_thread: bool = True,
        group_stall_timeout_s: float | None = None,
    ):
        if group_stall_timeout_s is not None and not group_stall_timeout_s > 0:
            raise ValueError(f"BatchingPolicy: group_stall_timeout_s must be > 0 or None, got {group_stall_timeout_s}")
        self.sampler = sampler
        self._streams = callable(getattr(sampler, "submit", None))
        self._streaming = 0  # streamed requests in flight
        self._streaming_since = 0.0
        self.max_wait_s = max_wait_s
        self.sample_on_loop_thread = sample_on_loop_thread
        self.group_stall_timeout_s = group_stall_timeout_s
        self._live = 0
        self._parked = 0
        self._asking = 0  # live episodes with a request not yet sent
        self._pending: list[_Pending] = []
        self._episodes: set[EpisodeState] = set()
        self._busy = False
        self._timer: asyncio.TimerHandle | None = None
        self._probe: asyncio.Handle | None = None
        self._probe_delay = 0.0
        self._maybe_left_waiting = False  # an episode stopped early since the last quiet look
        self._stall_timer: asyncio.TimerHandle | None = None
        self._in_flight: set[asyncio.Task] = set()
        self.num_calls = 0
        self.batch_sizes: list[int] = []
        self.sampler_seconds = 0.0
        self.num_valve_flushes = 0
        self.num_idle_flushes = 0
        self.num_loop_thread_calls = 0
        self.num_sibling_endings = 0
        self.num_stalled_groups = 0

    def episode(self) -> _EpisodeScope:
        """Scope of one live episode (``async with batcher.episode() as state:``): the batcher waits for it before
        each call while it is inside (and neither :func:`parked` nor blocked with the loop quiet)."""
        return _EpisodeScope(self)

    @contextlib.contextmanager
    def as_current(self) -> Iterator[BatchingPolicy]:
        """Make this the calling coroutine's :func:`current_batcher` (for work outside episodes: group rewards)."""
        token = _current_batcher.set(self)
        try:
            yield self
        finally:
            _current_batcher.reset(token)

    @contextlib.asynccontextmanager
    async def parked(self) -> AsyncIterator[ParkedSlot]:
        """Scope in which the calling episode waits on a sibling and must not be waited for (see :func:`parked`)."""
        episode = _current_episode.get()
        slot = ParkedSlot(self, rollout_clock.get(), episode if episode in self._episodes else None)
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

    def stopped_early(self, episode: EpisodeState | None, why: str) -> None:
        """``episode`` stopped by a budget or an error (``why``): siblings coupled with it that are left waiting
        are ended once the loop is quiet (``trl_envs.rollout.coupling``)."""
        if episode is not None and episode.links is not None:
            episode.stopped_early(why)
            self._maybe_left_waiting = True
            self._want_probe()

    async def sample(
        self, prompt: list[int], stop: StopCondition, max_tokens: int, *, sampler: Sampler | None = None
    ) -> TokensWithLogprobs:
        """Sample one action for ``prompt`` from ``sampler`` (default: the policy); resolves when the batch this
        request joined has been sampled. A request made inside an episode counts as that episode asking."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        clock = rollout_clock.get()
        if clock is not None:
            clock.pause()
        episode = _current_episode.get()
        if episode is not None and episode not in self._episodes:
            episode = None  # an episode of another batcher
        pending = _Pending(
            SampleRequest(list(prompt), list(stop), max_tokens),
            future,
            clock,
            episode,
            None if sampler is self.sampler else sampler,
        )
        if episode is not None:
            if episode.asking == 0:
                self._asking += 1
            episode.asking += 1
            episode.awaiting += 1
            episode.last_progress = loop.time()
        try:
            if pending.sampler is None and self._streams:
                return await self._submit(pending)
            self._pending.append(pending)
            if self.max_wait_s is not None and self._timer is None:
                self._timer = loop.call_later(self.max_wait_s, self._maybe_flush, True)
            self._maybe_flush()
            return await future
        finally:
            self._release(pending)
            if episode is not None:
                episode.awaiting -= 1
                episode.last_progress = loop.time()

    __call__ = sample

    async def _submit(self, p: _Pending) -> TokensWithLogprobs:
        """Send one request to a streaming sampler right away (see the module docstring) and await its result."""
        self._release(p)
        if p.clock is not None:
            p.clock.resume()
        self.num_calls += 1
        self.batch_sizes.append(1)
        if self._streaming == 0:
            self._streaming_since = time.perf_counter()
        self._streaming += 1
        try:
            return await asyncio.wrap_future(self.sampler.submit(p.request))
        finally:
            self._streaming -= 1
            if self._streaming == 0:
                self.sampler_seconds += time.perf_counter() - self._streaming_since

    async def wait_idle(self) -> None:
        """Wait for the sampler calls still running (their results are dropped), then stop the batcher's timers. A
        batch that ends early (an error) must not leave ``generate`` running in a worker thread while the caller goes
        on to train the model, nor probes and timers on a loop that outlives the batch."""
        while self._in_flight:
            await asyncio.gather(*list(self._in_flight), return_exceptions=True)
        for handle in (self._probe, self._stall_timer, self._timer):
            if handle is not None:
                handle.cancel()
        self._probe = self._stall_timer = self._timer = None

    # -- when to send ------------------------------------------------------------------------------------------------

    def _time(self) -> float:
        return asyncio.get_running_loop().time()

    def _release(self, p: _Pending) -> None:
        if not p.taken:
            p.taken = True
            if p.episode is not None:
                p.episode.asking -= 1
                if p.episode.asking == 0:
                    self._asking -= 1

    def _maybe_flush(self, force: bool = False) -> None:
        if force:
            self._timer = None
        if self._busy:
            return
        if not self._pending:
            if self._maybe_left_waiting:
                self._want_probe()
            return
        complete = self._asking > 0 and self._asking >= self._live - self._parked
        if complete or force:
            self._send(valve=not complete, idle=False)
        else:
            self._want_probe()

    def _want_probe(self) -> None:
        if self._probe is None:
            self._probe = self._loop_now().call_soon(self._look)

    def _loop_now(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()  # every caller runs on the batch's loop (a batcher may serve several loops)

    def _look(self) -> None:
        """Is the loop quiet apart from the pending requests? Sends them if so; else looks again when it may be."""
        self._probe = None
        if self._busy or not (self._pending or (self._maybe_left_waiting and self._episodes)):
            return  # nothing to decide (or the running call's end looks again)
        loop = self._loop_now()
        activity = loop_activity(loop, _sampler_threads_busy)
        if activity == "ready":
            self._probe_delay = 0.0
            self._probe = loop.call_soon(self._look)
        elif activity == "waiting" and self._pending and self._live - self._parked <= 0:
            self._probe_delay = 0.0  # requests made outside episodes (group rewards) with no episode left to wait for
            self._send(valve=False, idle=False)
        elif activity == "waiting":  # a timer, a socket or a thread: look again soon, less often the longer it lasts
            self._probe_delay = min(max(2 * self._probe_delay, 0.001), 0.05)
            self._probe = loop.call_later(self._probe_delay, self._look)
        elif activity == "unknown":  # a loop we cannot read: only the count and the valve decide
            self._probe_delay = 0.0
            if self._pending and self._asking >= self._live - self._parked:
                self._send(valve=False, idle=False)
        else:
            self._probe_delay = 0.0
            if self._pending:
                self._send(valve=False, idle=self._asking < self._live - self._parked)
            else:
                self._end_left_waiting()

    def _end_left_waiting(self) -> None:
        """The loop is quiet and nothing is pending: every live episode is blocked for good. End those whose coupled
        sibling stopped early (the others are for ``group_stall_timeout_s``)."""
        self._maybe_left_waiting = False
        for episode in list(self._episodes):
            if episode.asking == 0 and episode.ending is None:
                why = episode.left_waiting_by()
                if why is not None:
                    self.num_sibling_endings += 1
                    episode.end(why)

    def _watch_stalls(self) -> None:
        if self.group_stall_timeout_s is not None and self._stall_timer is None:
            self._stall_timer = self._loop_now().call_later(
                min(self.group_stall_timeout_s / 4, 5.0), self._check_stalls
            )

    def _check_stalls(self) -> None:
        self._stall_timer = None
        if not self._episodes:
            return
        if loop_activity(self._loop_now()) == "ready":  # episodes are about to run (after a long sampler call)
            self._stall_timer = self._loop_now().call_later(0.01, self._check_stalls)
            return
        now, limit = self._time(), self.group_stall_timeout_s
        groups: dict[Any, list[EpisodeState]] = {}
        for episode in self._episodes:
            groups.setdefault(episode.links.group if episode.links is not None else episode, []).append(episode)
        for episodes in groups.values():
            if any(e.awaiting or e.ending is not None for e in episodes):
                continue
            idle_for = now - max(e.last_progress for e in episodes)
            if idle_for < limit:
                continue
            name = episodes[0].links.group.name if episodes[0].links is not None else "an episode"
            message = (
                f"{name}: no episode of the group asked for an action or got one for {idle_for:.0f}s "
                f"(group_stall_timeout_s={limit:g}); {describe(episodes)}. The group was failed so that the "
                "rollout does not hang; raise group_stall_timeout_s (or set it to None) if its envs "
                "legitimately take longer"
            )
            logger.warning(message)
            self.num_stalled_groups += 1
            for episode in episodes:
                episode.end(GroupStalledError(message))
        self._watch_stalls()

    # -- sending -----------------------------------------------------------------------------------------------------

    def _send(self, *, valve: bool, idle: bool) -> None:
        batch = [p for p in self._pending if not p.future.done()]  # drop cancelled episodes' requests
        self._pending = []
        now = self._time()
        for p in batch:
            self._release(p)
            if p.episode is not None:
                p.episode.last_progress = now
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not batch:
            return
        if valve:
            self.num_valve_flushes += 1
        elif idle:
            self.num_idle_flushes += 1
        self._busy = True
        for p in batch:
            if p.clock is not None:
                p.clock.resume()
        on_loop_thread = self.sample_on_loop_thread and not valve  # the valve: some episode is still busy
        task = self._loop_now().create_task(self._run(batch, on_loop_thread))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _run(self, batch: list[_Pending], on_loop_thread: bool) -> None:
        by_sampler: dict[int, tuple[Sampler, list[_Pending]]] = {}
        for p in batch:
            sampler = p.sampler if p.sampler is not None else self.sampler
            by_sampler.setdefault(id(sampler), (sampler, []))[1].append(p)
        try:
            for sampler, items in by_sampler.values():
                try:
                    requests = [p.request for p in items]
                    start = time.perf_counter()
                    if on_loop_thread:
                        self.num_loop_thread_calls += 1
                        results = call_sampler(sampler, requests)
                    else:
                        results = await run_blocking(call_sampler, sampler, requests)
                    self.sampler_seconds += time.perf_counter() - start
                    self.num_calls += 1
                    self.batch_sizes.append(len(items))
                    if len(results) != len(items):
                        raise RuntimeError(
                            f"BatchingPolicy: {type(sampler).__name__}.sample returned {len(results)} "
                            f"results for {len(items)} requests; a Sampler returns one per request, "
                            "in order"
                        )
                    for p, r in zip(items, results):
                        if not p.future.done():
                            p.future.set_result(r)
                except Exception as e:  # noqa: BLE001 - every waiting episode must hear about it
                    for p in items:
                        if not p.future.done():
                            p.future.set_exception(e)
        except BaseException as e:  # interrupted (Ctrl-C, cancelled): the rest hear about it too
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(e)
            raise
        finally:
            self._busy = False
            if self._pending and self.max_wait_s is not None and self._timer is None:
                self._timer = self._loop_now().call_later(self.max_wait_s, self._maybe_flush, True)
            self._maybe_flush()


def _sampler_threads_busy() -> bool:
    return blocking_calls_in_flight() > 0


register_quiet_timer(BatchingPolicy._maybe_flush)  # the valve: it sends requests, which is not an episode's work
for _callback in (BatchingPolicy._look, BatchingPolicy._check_stalls):
    register_quiet_timer(_callback, bookkeeping=True)


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
    A parked episode whose sibling stopped early (a budget, an error) is ended by the engine once nothing else can
    run (``trl_envs.rollout.coupling``); bound the wait itself anyway. Outside a batcher's episode (a plain policy, a
    test) it does nothing.

    Since the batcher also sends its requests when the event loop is quiet, a wait on a sibling needs no hint in most
    envs; ``parked()`` still helps where the loop is not quiet meanwhile (a socket kept open, a thread of the env's
    own), and it is what lets the engine end the wait when the sibling stopped early.
    """
    batcher, episode = _current_batcher.get(), _current_episode.get()
    if batcher is None or episode is None:
        yield ParkedSlot(None)
        return
    async with batcher.parked() as slot:
        yield slot
