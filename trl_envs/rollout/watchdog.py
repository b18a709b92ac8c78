"""The env watchdog: rollouts that run too long, and env code that blocks the event loop.

All envs of a rollout batch share one asyncio event loop. An env method that blocks it (``time.sleep``, a
synchronous HTTP call, a CPU-heavy grader) stops every other episode meanwhile, and no timeout can interrupt it.
:class:`LoopWatchdog` runs every env method (``make_envs``, ``initial_observation``, ``step``,
``compute_group_rewards``, ``cleanup``) through :meth:`LoopWatchdog.watch`, which times each synchronous stretch of
the method; a helper thread reports a stretch longer than ``threshold_s`` while it still blocks (so an env stuck
forever is named too), once per env method and process, as a logged warning.

:class:`RolloutTimeoutError` is what a rollout that ran past ``rollout_timeout`` raises; :func:`run_with_timeout`
applies such a limit to one env call.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar

from .worker_threads import env_call

logger = logging.getLogger(__name__)
T = TypeVar("T")

_reported: set[str] = set()
_reported_lock = threading.Lock()

current_watchdog: contextvars.ContextVar[LoopWatchdog | None] = contextvars.ContextVar(
    "trl_envs_watchdog", default=None)
"""The watchdog of the rollout batch the calling code runs in (``None`` outside one)."""


class RolloutTimeoutError(TimeoutError):
    """A rollout, or one env call, ran past its ``rollout_timeout`` (``per_rollout_timeout``)."""


class LoopWatchdog:
    """Reports env methods that block the event loop for longer than ``threshold_s`` seconds (module docstring).

    Use it as a context manager around a rollout batch (it starts and stops the helper thread and makes itself
    :data:`current_watchdog`); ``threshold_s=None`` turns reporting off (env calls are still marked for
    ``trl_envs.rollout.worker_threads``).

    Attributes:
        reports: the messages this watchdog logged.
    """

    def __init__(self, threshold_s: float | None = 1.0):
        if threshold_s is not None and not threshold_s > 0:
            raise ValueError(f"LoopWatchdog: threshold_s must be > 0 or None, got {threshold_s}")
        self.threshold_s = threshold_s
        self.reports: list[str] = []
        self._current: tuple[str, str, float] | None = None  # (method key, description, start) of the running stretch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._token: contextvars.Token | None = None

    def __enter__(self) -> LoopWatchdog:
        self._token = current_watchdog.set(self)
        if self.threshold_s is not None:
            self._thread = threading.Thread(target=self._poll, name="trl_envs-watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._token is not None:
            current_watchdog.reset(self._token)
            self._token = None

    def watch(self, coro: Coroutine[Any, Any, T], key: str, description: str | None = None) -> Awaitable[T]:
        """``coro`` (a call of the env method ``key``, e.g. ``"Sleepy.step"``), timed stretch by stretch."""
        return _Watched(self, coro, key, description or key)

    def _poll(self) -> None:
        interval = min(max(self.threshold_s / 4, 0.01), 0.5)
        while not self._stop.wait(interval):
            current = self._current
            if current is not None:
                key, description, start = current
                blocked = time.perf_counter() - start
                if blocked >= self.threshold_s:
                    self._report(key, f"{description} has blocked the event loop for {blocked:.1f}s so far")

    def _finished(self, key: str, description: str, seconds: float) -> None:
        if self.threshold_s is not None and seconds >= self.threshold_s:
            self._report(key, f"{description} blocked the event loop for {seconds:.1f}s")

    def _report(self, key: str, what: str) -> None:
        with _reported_lock:
            if key in _reported:
                return
            _reported.add(key)
        message = (f"{what}: every other episode of the batch waited, and no timeout can interrupt it. Await I/O "
                   "instead, or run blocking code with `await asyncio.to_thread(...)`. (Reported once per env method.)")
        self.reports.append(message)
        logger.warning(message)


class _Watched:
    """Drives a coroutine step by step, timing each synchronous stretch (see :meth:`LoopWatchdog.watch`)."""

    __slots__ = ("_dog", "_coro", "_key", "_description")

    def __init__(self, dog: LoopWatchdog, coro: Coroutine, key: str, description: str):
        self._dog, self._coro, self._key, self._description = dog, coro, key, description

    def __await__(self) -> Generator[Any, Any, Any]:
        dog, inner = self._dog, self._coro.__await__()
        value: Any = None
        error: BaseException | None = None
        while True:
            outer = dog._current
            start = time.perf_counter()
            dog._current = (self._key, self._description, start)
            token = env_call.set(self._key)
            try:
                if error is not None:
                    yielded = inner.throw(error)
                else:
                    yielded = inner.send(value)
            except StopIteration as stop:
                return stop.value
            finally:
                error = None
                env_call.reset(token)
                dog._current = outer
                dog._finished(self._key, self._description, time.perf_counter() - start)
            try:
                value = yield yielded
            except BaseException as e:  # noqa: BLE001 - thrown into the env's coroutine (cancellation included)
                value, error = None, e


def watch(coro: Coroutine[Any, Any, T], key: str, description: str | None = None) -> Awaitable[T]:
    """``coro`` watched by the :data:`current_watchdog`, or as it is outside a watched batch."""
    dog = current_watchdog.get()
    return coro if dog is None else dog.watch(coro, key, description)


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
