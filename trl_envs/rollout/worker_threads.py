"""Worker threads that an env can abandon: ``asyncio.to_thread`` calls never hold up the end of a rollout batch.

An env that runs blocking code with ``await asyncio.to_thread(...)`` (what docs/custom_envs.md recommends) and then
times out is cancelled, but its thread cannot be: it runs on until the blocking call returns. With asyncio's default
executor the batch then waits for it anyway (``asyncio.run`` shuts the executor down with ``wait=True``), and a pool
of ``cpu_count + 4`` workers can fill up with such threads until nothing else (the sampler included) gets one.

:func:`use_abandonable_threads` makes the running loop's default executor :class:`AbandonableThreadPool`:

* a call submitted from env code (an env or builder method on the submitting stack) is never waited for at shutdown: if
  its env was cancelled it finishes in the background, on a daemon thread that does not keep the interpreter alive
  either;
* every other call (the sampler's, a user's own ``to_thread`` outside env code) is waited for, as before;
* a new worker starts whenever none is idle, so stuck threads never starve the others; idle workers exit after
  ``idle_exit_s``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

from .watchdog import env_method_on_stack


class AbandonableThreadPool(concurrent.futures.ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` (asyncio accepts no other kind as a default executor) on daemon threads whose
    ``shutdown`` waits only for calls not made from env code (see the module docstring). Shared by every loop of the
    process, so ``shutdown`` never stops it from taking new work."""

    def __init__(self, idle_exit_s: float = 30.0):
        super().__init__(max_workers=1)  # only sets attributes: every method that uses them is overridden
        self.idle_exit_s = idle_exit_s
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._running: dict[concurrent.futures.Future, str | None] = {}
        self._loops: dict[concurrent.futures.Future, asyncio.AbstractEventLoop | None] = {}

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        submitted_by = env_method_on_stack(sys._getframe(1))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._running[future] = submitted_by
            self._loops[future] = loop
            start_worker = self._idle == 0
            if not start_worker:
                self._idle -= 1
        self._work.put((future, fn, args, kwargs))
        if start_worker:
            threading.Thread(target=self._worker, name="trl_envs-worker", daemon=True).start()
        return future

    def _worker(self) -> None:
        while True:
            try:
                future, fn, args, kwargs = self._work.get(timeout=self.idle_exit_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0 and self._work.empty():
                        self._idle -= 1
                        return
                continue  # a submit counted on this worker just as it timed out: take that work
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args, **kwargs))
                    except BaseException as e:  # noqa: BLE001 - handed to whoever awaits the future
                        future.set_exception(e)
            finally:
                with self._lock:
                    self._running.pop(future, None)
                    self._loops.pop(future, None)
                    self._idle += 1

    def calls_in_flight(self, loop: asyncio.AbstractEventLoop | None = None) -> int:
        """How many calls are queued or running (only those submitted from ``loop``, when given). A call stops
        counting only after its result was handed to its future (and so to the loop that awaits it)."""
        with self._lock:
            if loop is None:
                return len(self._running)
            return sum(1 for submitted_from in self._loops.values() if submitted_from is loop)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Wait (``wait=True``) for the running calls that were not made from env code; keep serving afterwards."""
        if not wait:
            return
        with self._lock:
            waited = [f for f, name in self._running.items() if name is None]
        concurrent.futures.wait(waited)


_pool: AbandonableThreadPool | None = None
_pool_lock = threading.Lock()


def use_abandonable_threads(loop: asyncio.AbstractEventLoop | None = None) -> AbandonableThreadPool:
    """Make the process-wide :class:`AbandonableThreadPool` the default executor of ``loop`` (the running loop by
    default) and return it."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = AbandonableThreadPool()
    (loop or asyncio.get_running_loop()).set_default_executor(_pool)
    return _pool
