"""A client-side limit on the sessions open at once against one server: episodes beyond it wait for a free one.

An OpenEnv server holds one env instance per session and refuses sessions past its ``max_concurrent_envs``
(default 1). With ``max_sessions=N`` the episodes of a rollout batch take one of ``N`` slots per server URL before
opening their session and give it back when the session closes; the others wait, *parked*
(:func:`trl_envs.rollout.batching.parked`), so the batched sampler serves the running episodes meanwhile instead of
waiting for the queued ones.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from ..rollout.batching import parked

_SEMAPHORES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, int], asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _semaphore(url: str, limit: int) -> asyncio.Semaphore:
    per_loop = _SEMAPHORES.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault((url.rstrip("/"), limit), asyncio.Semaphore(limit))


async def acquire_slot(url: str, limit: int | None) -> Callable[[], None]:
    """Take one of ``limit`` session slots of ``url`` (in the running event loop), waiting parked while none is free;
    returns the function that gives it back (idempotent). ``limit=None``: no limit (nothing is taken)."""
    if limit is None:
        return lambda: None
    semaphore = _semaphore(url, limit)
    if semaphore.locked():
        async with parked() as slot:
            await semaphore.acquire()
            slot.unpark()
    else:
        await semaphore.acquire()
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            semaphore.release()

    return release
