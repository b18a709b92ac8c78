"""The env watchdog: rollouts that run too long, and env code that blocks the event loop.

All envs of a rollout batch share one asyncio event loop. An env method that blocks it (``time.sleep``, a
synchronous HTTP call, a CPU-heavy grader) stops every other episode meanwhile, and no timeout can interrupt it.
:class:`LoopWatchdog` notices: a heartbeat callback on the loop stamps the time every ``threshold_s / 4``; a helper
thread that finds the heartbeat older than ``threshold_s`` looks at the loop thread's stack and names the env method
running there (``Sleepy.step``), while it still blocks (so an env stuck forever is named too). Each env method is
reported once per process, as a logged warning. Nothing runs per env call: healthy rollouts pay nothing.

:class:`RolloutTimeoutError` is what a rollout that ran past ``rollout_timeout`` raises; :func:`run_with_timeout`
applies such a limit to one env call.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Awaitable
from types import FrameType
from typing import Any, TypeVar

from ..core.types import Env, EnvGroupBuilder
from .validation import env_name

logger = logging.getLogger(__name__)
T = TypeVar("T")

_reported: set[str] = set()
_reported_lock = threading.Lock()


class RolloutTimeoutError(TimeoutError):
    """A rollout, or one env call, ran past its ``rollout_timeout`` (``per_rollout_timeout``)."""


def env_method_on_stack(frame: FrameType | None) -> str | None:
    """``"Env.method"`` of the innermost env or builder method on the stack ending at ``frame`` (``None``: none)."""
    while frame is not None:
        code = frame.f_code
        if code.co_argcount and code.co_varnames[0] == "self":
            owner = frame.f_locals.get("self")
            if isinstance(owner, Env):
                return f"{env_name(owner)}.{code.co_name}"
            if isinstance(owner, EnvGroupBuilder):
                return f"{type(owner).__name__}.{code.co_name}"
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
        self._interval = 0.0 if threshold_s is None else min(threshold_s / 4, 0.5)
        self._last_beat = time.perf_counter()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._beat: asyncio.TimerHandle | None = None
        self._loop_thread = 0

    def __enter__(self) -> LoopWatchdog:
        if self.threshold_s is not None:
            self._loop = asyncio.get_running_loop()
            self._loop_thread = threading.get_ident()
            self._heartbeat()
            threading.Thread(target=self._watch, name="trl_envs-watchdog", daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.cancel()

    def _heartbeat(self) -> None:
        self._last_beat = time.perf_counter()
        if not self._stop.is_set():
            self._beat = self._loop.call_later(self._interval, self._heartbeat)

    def _watch(self) -> None:
        while not self._stop.wait(self._interval):
            blocked = time.perf_counter() - self._last_beat - self._interval  # the beat may have been due that late
            if blocked >= self.threshold_s:
                frame = sys._current_frames().get(self._loop_thread)
                where = env_method_on_stack(frame)
                if where is None and frame is not None:
                    where = f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})"
                if where is not None and not self._stop.is_set():
                    self._report(where, blocked)

    def _report(self, where: str, blocked: float) -> None:
        with _reported_lock:
            if where in _reported:
                return
            _reported.add(where)
        message = (f"{where} has blocked the event loop for {blocked:.1f}s so far: every other episode of the batch "
                   "waits, and no timeout can interrupt it. Await I/O instead, or run blocking code with "
                   "`await asyncio.to_thread(...)`. (Reported once per env method.)")
        self.reports.append(message)
        logger.warning(message)


async def run_with_timeout(awaitable: Awaitable[T], seconds: float | None, what: str) -> T:
    """Await ``awaitable``; past ``seconds`` (``None``: no limit) raise :class:`RolloutTimeoutError` naming ``what``."""
    if seconds is None:
        return await awaitable
    start = time.perf_counter()
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except (asyncio.TimeoutError, TimeoutError):
        raise RolloutTimeoutError(f"{what} timed out: still running after {time.perf_counter() - start:.1f}s "
                                  f"(rollout_timeout={seconds}s)") from None
