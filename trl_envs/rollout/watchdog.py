"""The env watchdog: rollouts that run too long, and env code that blocks the event loop.

All envs of a rollout batch share one asyncio event loop. An env method that blocks it (``time.sleep``, a
synchronous HTTP call, a CPU-heavy grader) stops every other episode meanwhile, and no timeout can interrupt it.
:class:`LoopWatchdog` notices: a heartbeat callback on the loop stamps the time every ``threshold_s / 4``; the
process's one monitor thread (started once, not per batch: starting a thread makes the caller wait for it to be
scheduled) that finds the heartbeat older than ``threshold_s`` looks at the loop thread's stack and names the env
method running there (``Sleepy.step``, from code objects registered by :func:`register_env_methods`), while it still
blocks (so an env stuck forever is named too). A batched sampler call made on the loop thread
(``batching.call_sampler``) is the loop's own work, not a blocking env, and is never reported. Each env method is
reported once per process, as a logged warning. Nothing runs per env call: healthy rollouts pay nothing.

Rollouts that run too long: :func:`run_with_deadline` limits one episode's own time (not the time its sampling
requests wait for other episodes), :func:`run_with_timeout` one env call; both raise :class:`RolloutTimeoutError`
naming what ran, what it was doing (:func:`note_activity`) and for how long.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from types import CodeType, FrameType
from typing import Any, TypeVar

from .batching import call_sampler, rollout_clock
from .loop_idle import register_quiet_timer

logger = logging.getLogger(__name__)
T = TypeVar("T")

_reported: set[str] = set()
_reported_lock = threading.Lock()


class RolloutTimeoutError(TimeoutError):
    """A rollout, or one env call, ran past its ``rollout_timeout`` (``per_rollout_timeout``)."""


_WATCHED_METHODS = ("initial_observation", "initial_messages", "step", "make_envs", "compute_group_rewards", "cleanup")
_method_names: dict[CodeType, str] = {}
_registered_types: set[type] = set()
_registry_lock = threading.Lock()


def register_env_methods(obj: Any) -> None:
    """Let :func:`env_method_on_stack` name the methods of ``obj``'s class (an env, a builder) and of the message env
    inside a ``MessageTokenEnv``: code objects are mapped to ``"DefiningClass.method"`` once per class."""
    for target in (obj, getattr(obj, "message_env", None)):
        cls = type(target)
        if target is None or cls in _registered_types:
            continue
        names = {}
        for klass in cls.__mro__:
            for name in _WATCHED_METHODS:
                code = (
                    getattr(inspect.unwrap(klass.__dict__[name]), "__code__", None) if name in klass.__dict__ else None
                )
                if code is not None:
                    names[code] = f"{klass.__name__}.{name}"
        with _registry_lock:
            for code, name in names.items():
                _method_names.setdefault(code, name)
            _registered_types.add(cls)


def env_method_on_stack(frame: FrameType | None) -> str | None:
    """``"Env.method"`` of the innermost registered env or builder method on the stack ending at ``frame`` (``None``:
    none). Reads only code objects, so it is safe on another thread's stack."""
    while frame is not None:
        name = _method_names.get(frame.f_code)
        if name is not None:
            return name
        frame = frame.f_back
    return None


class LoopWatchdog:
    """Reports env methods that block the event loop for longer than ``threshold_s`` seconds (module docstring).

    Use it as a context manager inside the running loop, around a rollout batch; ``threshold_s=None`` turns it off.

    Attributes:
        reports: the messages this watchdog logged.
    """

    def __init__(self, threshold_s: float | None = 1.0):
        if threshold_s is not None and not threshold_s > 0:
            raise ValueError(f"LoopWatchdog: threshold_s must be > 0 or None, got {threshold_s}")
        self.threshold_s = threshold_s
        self.reports: list[str] = []
        self.interval = 0.0 if threshold_s is None else min(threshold_s / 4, 0.5)
        self._last_beat = time.perf_counter()
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._beat: asyncio.TimerHandle | None = None
        self._loop_thread = 0
        self._suspect: tuple[float, str] | None = None  # (heartbeat, where) of the last poll that found it blocked

    def __enter__(self) -> LoopWatchdog:
        if self.threshold_s is not None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._heartbeat()
            _monitor().watch(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stopped = True
        if self._beat is not None:
            self._beat.cancel()
        if self.threshold_s is not None:
            _monitor().unwatch(self)

    def _heartbeat(self) -> None:
        self._last_beat = time.perf_counter()
        if not self._stopped:
            self._beat = self._loop.call_later(self.interval, self._heartbeat)

    def poll(self, now: float, late: float) -> None:
        """One look from the monitor thread at ``now``, which woke ``late`` seconds after it was due."""
        beat = self._last_beat
        blocked = now - beat - self.interval  # the beat may have been due that late
        if blocked < self.threshold_s or late > self.threshold_s:
            self._suspect = None  # not blocked, or the monitor itself was starved of CPU: the whole process was
            return
        frame = sys._current_frames().get(self._loop_thread)
        if _sampling_on_stack(frame):
            self._suspect = None  # the loop is running the batch's sampler call, its own work
            return
        where = env_method_on_stack(frame)
        if where is None and frame is not None:
            where = f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})"
        if where is not None and self._suspect == (beat, where) and not self._stopped:
            self._report(where, blocked)  # seen twice in a row in the same stretch: the loop really is stuck there
        self._suspect = (beat, where) if where is not None else None

    def _report(self, where: str, blocked: float) -> None:
        with _reported_lock:
            if where in _reported:
                return
            _reported.add(where)
        message = (
            f"{where} has blocked the event loop for {blocked:.1f}s so far: every other episode of the batch "
            "waits, and no timeout can interrupt it. Await I/O instead, or run blocking code with "
            "`await asyncio.to_thread(...)`. (Reported once per env method.)"
        )
        self.reports.append(message)
        logger.warning(message)


def _sampling_on_stack(frame: FrameType | None) -> bool:
    """Whether ``batching.call_sampler`` is on the stack ending at ``frame`` (reads only code objects)."""
    while frame is not None:
        if frame.f_code is _CALL_SAMPLER_CODE:
            return True
        frame = frame.f_back
    return False


_CALL_SAMPLER_CODE = call_sampler.__code__


class _Monitor:
    """The process's one watchdog thread: polls every :class:`LoopWatchdog` in use at the shortest of their
    intervals. With none in use it polls on for ``linger_s`` (a trainer's next batch comes a training step later:
    no wake-up is needed to start watching it), then sleeps until one is."""

    def __init__(self, linger_s: float = 10.0):
        self.pid = os.getpid()
        self.linger_s = linger_s
        self._cond = threading.Condition(threading.Lock())
        self._watched: list[LoopWatchdog] = []
        self._wait_s: float | None = None  # the monitor's current wait (None: asleep until a watchdog is in use)
        self._thread = threading.Thread(target=self._run, name="trl_envs-watchdog", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self.pid == os.getpid() and self._thread.is_alive()

    def watch(self, watchdog: LoopWatchdog) -> None:
        with self._cond:
            self._watched.append(watchdog)
            if self._wait_s is None or watchdog.interval < self._wait_s:
                self._cond.notify()  # asleep, or waiting longer than this watchdog's interval

    def unwatch(self, watchdog: LoopWatchdog) -> None:
        with self._cond:
            with contextlib.suppress(ValueError):
                self._watched.remove(watchdog)

    def _run(self) -> None:
        interval, idle_since = 0.5, None
        while True:
            with self._cond:
                if self._watched:
                    interval, idle_since = min(w.interval for w in self._watched), None
                elif idle_since is None:
                    idle_since = time.perf_counter()
                if not self._watched and time.perf_counter() - idle_since > self.linger_s:
                    self._wait_s = None
                    self._cond.wait()
                    continue
                self._wait_s = interval
                due = time.perf_counter() + interval
                self._cond.wait(interval)
                watched = list(self._watched)
            now = time.perf_counter()
            for watchdog in watched:
                watchdog.poll(now, max(0.0, now - due))


_monitor_instance: _Monitor | None = None
_monitor_lock = threading.Lock()


def _monitor() -> _Monitor:
    """The process's monitor (a new one after ``fork``: the parent's thread does not exist in the child)."""
    global _monitor_instance
    with _monitor_lock:
        if _monitor_instance is None or not _monitor_instance.alive():
            _monitor_instance = _Monitor()
        return _monitor_instance


def _forget_monitor_after_fork() -> None:
    global _monitor_instance, _monitor_lock
    _monitor_instance = None  # its thread does not exist in the child
    _monitor_lock = threading.Lock()  # it may have been held by another thread at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_monitor_after_fork)


_episode_activity: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "trl_envs_episode_activity", default=None
)
"""Where the calling episode is (``["Sleepy.step (turn 2)"]``), kept up to date for timeout messages."""


def note_activity(what: str) -> None:
    """Record what the calling episode is doing (for the message of its timeout, see :func:`run_with_deadline`)."""
    slot = _episode_activity.get()
    if slot is not None:
        slot[0] = what


async def run_with_deadline(rollout: Callable[[], Awaitable[T]], seconds: float | None, where: str) -> T:
    """Await ``rollout()`` (one episode) under a ``seconds`` limit on its own time (its requests' wait for other
    episodes to join a sampling batch excluded: the clock is paused through
    ``trl_envs.rollout.batching.rollout_clock``); past it, :class:`RolloutTimeoutError` names ``where`` and what the
    episode was doing (:func:`note_activity`). A rollout that finishes late (an env call blocked the loop past the
    deadline) counts as timed out too."""
    if seconds is None:
        return await rollout()
    loop = asyncio.get_running_loop()
    start = loop.time()
    activity = ["starting"]
    activity_token = _episode_activity.set(activity)
    deadline = None
    finished_late = False
    try:
        async with _timeout(seconds) as deadline:
            clock_token = rollout_clock.set(_PausableClock(deadline))
            try:
                result = await rollout()
            finally:
                rollout_clock.reset(clock_token)
            when = deadline.when()
            if when is not None and loop.time() > when:  # an env call blocked the loop past the deadline
                finished_late = True
                raise TimeoutError
            return result
    except (asyncio.TimeoutError, TimeoutError):
        if not finished_late and not (deadline is not None and deadline.expired()):
            raise  # the env's own TimeoutError, not the rollout's
        raise RolloutTimeoutError(
            f"{where} timed out: its own time (env, model, grading) passed rollout_timeout={seconds}s; it was in "
            f"{activity[0]}, {loop.time() - start:.1f}s after it started"
        ) from None
    finally:
        _episode_activity.reset(activity_token)


async def run_with_timeout(awaitable: Awaitable[T], seconds: float | None, what: str) -> T:
    """Await ``awaitable``; past ``seconds`` (``None``: no limit) raise :class:`RolloutTimeoutError` naming ``what``."""
    if seconds is None:
        return await awaitable
    start = time.perf_counter()
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except (asyncio.TimeoutError, TimeoutError):
        raise RolloutTimeoutError(
            f"{what} timed out: still running after {time.perf_counter() - start:.1f}s (rollout_timeout={seconds}s)"
        ) from None


def _timeout(seconds: float | None) -> contextlib.AbstractAsyncContextManager:
    """``asyncio.timeout`` (runs the body in the current task, so an episode registers with the batcher at once)."""
    if seconds is None:
        return contextlib.nullcontext()
    if hasattr(asyncio, "timeout"):
        return asyncio.timeout(seconds)
    return _WaitForTimeout(seconds)  # Python 3.10


class _WaitForTimeout:
    """The part of ``asyncio.Timeout`` used here (``when`` / ``reschedule``), for Python 3.10."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._handle: asyncio.TimerHandle | None = None
        self._when: float | None = None
        self._expired = False

    async def __aenter__(self):
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self.reschedule(self._loop.time() + self.seconds)
        return self

    def when(self) -> float | None:
        return self._when

    def expired(self) -> bool:
        return self._expired

    def reschedule(self, when: float | None) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._when = when
        self._handle = None if when is None else self._loop.call_at(when, self._expire)

    def _expire(self) -> None:
        self._expired = True
        self._task.cancel()

    async def __aexit__(self, exc_type, exc, tb):
        if self._handle is not None:
            self._handle.cancel()
        if exc_type is asyncio.CancelledError and self._expired:
            raise TimeoutError from exc
        return False


register_quiet_timer(LoopWatchdog._heartbeat, bookkeeping=True)  # the watchdog's beat is not an episode's work
register_quiet_timer(_WaitForTimeout._expire)  # a deadline only ends a wait


class _PausableClock:
    """Stops and restarts a rollout's deadline (see ``trl_envs.rollout.batching.rollout_clock``)."""

    def __init__(self, deadline: Any):
        self._deadline = deadline
        self._remaining: float | None = None

    def pause(self) -> None:
        when = self._deadline.when()
        if self._remaining is None and when is not None:
            self._remaining = max(0.0, when - asyncio.get_running_loop().time())
            self._deadline.reschedule(None)

    def resume(self) -> None:
        if self._remaining is not None:
            remaining, self._remaining = self._remaining, None
            with contextlib.suppress(RuntimeError):  # the rollout already left its timeout block
                self._deadline.reschedule(asyncio.get_running_loop().time() + remaining)
