"""The event loop that owns every OpenEnv connection of the process, on its own daemon thread.

OpenEnv sessions are WebSockets with keepalive pings. The rollout loop samples a complete batch on its own thread
(docs/DESIGN.md, "One batched sampler call per turn"), so a connection living on that loop could not answer the
server's pings while ``generate`` runs, and a long generation would get its sessions dropped by the server. Here the
connections live on a separate loop whose thread keeps running (torch releases the GIL in its kernels); env code on
any loop awaits :func:`call`, which runs a coroutine there.

Every open session is recorded (:func:`track` / :func:`untrack`), so that :func:`close_all` can close what is still
open when the interpreter exits (an interrupted run): a server must not be left holding sessions.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

logger = logging.getLogger(__name__)
T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_open: set[Any] = set()  # objects with an async ``close()``, still open


def io_loop() -> asyncio.AbstractEventLoop:
    """The I/O loop, started on first use (a daemon thread named ``trl-envs-openenv-io``)."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=run, name="trl-envs-openenv-io", daemon=True).start()
            ready.wait()
            _loop = loop
        return _loop


async def call(factory: Callable[[], Awaitable[T]]) -> T:
    """Await ``factory()`` on the I/O loop from any other loop. Cancelling the caller cancels it there too."""
    loop = io_loop()
    future = asyncio.run_coroutine_threadsafe(_awaited(factory), loop)
    return await asyncio.wrap_future(future)


def run(factory: Callable[[], Awaitable[T]], timeout: float | None = None) -> T:
    """``factory()`` run to its end on the I/O loop, from synchronous code (not from the I/O loop itself)."""
    future = asyncio.run_coroutine_threadsafe(_awaited(factory), io_loop())
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"OpenEnv I/O did not finish within {timeout} s") from None


async def _awaited(factory: Callable[[], Awaitable[T]]) -> T:
    return await factory()


def track(session: Any) -> None:
    """Record an open session (it has an async ``close()``)."""
    with _lock:
        _open.add(session)


def untrack(session: Any) -> None:
    with _lock:
        _open.discard(session)


def open_sessions() -> list[Any]:
    """The sessions of this process still open (a finished rollout batch leaves none)."""
    with _lock:
        return list(_open)


def close_all(timeout: float = 10.0) -> int:
    """Close every session still open; returns how many there were. Called at interpreter exit."""
    sessions = open_sessions()
    if not sessions or _loop is None or _loop.is_closed():
        return len(sessions)

    async def close_them() -> None:
        await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)

    try:
        run(close_them, timeout)
    except Exception as e:  # noqa: BLE001 - best effort at exit
        logger.warning("closing %d OpenEnv sessions at exit failed: %s", len(sessions), e)
    return len(sessions)


def _forget_after_fork() -> None:
    """A forked child has no I/O thread (and must not touch the parent's connections): it starts its own."""
    global _loop, _lock
    _loop, _lock = None, threading.Lock()
    _open.clear()


atexit.register(close_all)
os.register_at_fork(after_in_child=_forget_after_fork)
