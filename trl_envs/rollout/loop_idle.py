"""Whether an asyncio event loop can still make progress on its own: the one place that reads asyncio's private state.

A rollout batch needs to know when every episode that has not asked for an action is blocked on something only a
sampled action can release (a sibling's move, an ``asyncio.Condition`` of a two-player game): then waiting longer
for them is pointless and the pending sampling requests go out (``trl_envs.rollout.batching``). An env that is
doing real work must not be mistaken for that: a coroutine that is ready to run, a sleep or other timer, a socket or
pipe being waited on, a call running in a worker thread (``asyncio.to_thread``).

:func:`loop_activity` answers from the loop's own queues. It reads private attributes of CPython's selector event
loops (``_ready``, ``_scheduled``, ``_selector``, ``_ssock``, ``_default_executor``); on any other loop (uvloop, the
Windows proactor) it answers ``"unknown"``, and callers then rely on their other rules (every episode asked, the
``max_wait_s`` valve). Nothing else in the package touches these names.

What counts as *quiet* (cannot make progress by itself):

* callbacks queued to run now that only keep the books (another batcher's probe, the watchdog's heartbeat);
* timers whose callback only ends a wait with a timeout: ``asyncio.timeout`` / ``wait_for`` / ``asyncio.wait``
  deadlines (a ``move_timeout``, a ``rollout_timeout``), and callbacks registered with :func:`register_quiet_timer`
  (the batcher's own valve and probes, the watchdog's heartbeat). A timer of any other kind (``asyncio.sleep``, a
  user's ``call_later``) is work in progress;
* the loop's own wake-up pipe. Any other file descriptor registered with the loop (a socket being read, a server,
  an idle keep-alive connection) counts as work in progress: the loop cannot tell whether anyone waits on it;
* no call in flight in the loop's default executor, when that is trl_envs' ``AbandonableThreadPool`` (or was never
  created), and none in ``event_loop.run_blocking``'s pool. Work handed to another executor, or to a thread the loop
  does not know (``call_soon_threadsafe`` from a thread of your own), is invisible: the loop may look quiet while it
  runs. Such envs should hold their sibling waits in :func:`~trl_envs.rollout.batching.parked` or rely on the valve.
"""

from __future__ import annotations

import asyncio
import asyncio.tasks
from collections.abc import Callable
from typing import Any, Literal

LoopActivity = Literal["ready", "waiting", "quiet", "unknown"]
"""``"ready"``: callbacks are queued to run now. ``"waiting"``: nothing runs now, but a timer, a file descriptor or
a worker thread can wake the loop. ``"quiet"``: nothing can (see the module docstring). ``"unknown"``: not a loop
this module can read."""

_quiet_callbacks: set[Any] = set()
_bookkeeping_callbacks: set[Any] = set()


def register_quiet_timer(callback: Callable[..., Any], *, bookkeeping: bool = False) -> None:
    """Count timers that call ``callback`` (a function, or the function behind a bound method) as quiet: they end a
    wait or watch the loop, they do not do an episode's work. ``bookkeeping``: the callback never wakes an episode
    (a batcher's own probe, the watchdog's beat), so it is not work even when queued to run now."""
    fn = getattr(callback, "__func__", callback)
    _quiet_callbacks.add(fn)
    if bookkeeping:
        _bookkeeping_callbacks.add(fn)


for _fn in (
    getattr(getattr(asyncio, "timeouts", None), "Timeout", None),
    getattr(asyncio.tasks, "_release_waiter", None),
):
    if isinstance(_fn, type):
        _fn = getattr(_fn, "_on_timeout", None)
    if _fn is not None:
        register_quiet_timer(_fn)


def loop_activity(loop: asyncio.AbstractEventLoop, threads_busy: Callable[[], bool] | None = None) -> LoopActivity:
    """What ``loop`` (the running loop, called from its own thread) can still do on its own; see :data:`LoopActivity`.

    ``threads_busy``: whether calls run in worker threads that will call back into the loop (checked first: a call
    that finishes hands its result to the loop's ready queue before it stops counting as busy, so checking the
    threads before the queue never misses one in between).
    """
    ready, scheduled = getattr(loop, "_ready", None), getattr(loop, "_scheduled", None)
    selector, wakeup = getattr(loop, "_selector", None), getattr(loop, "_ssock", None)
    if ready is None or scheduled is None or selector is None or wakeup is None:
        return "unknown"
    executor = getattr(loop, "_default_executor", None)
    if executor is not None and not hasattr(executor, "calls_in_flight"):
        return "unknown"  # a stdlib pool does not say how many calls run in it
    threads = (executor is not None and executor.calls_in_flight(loop) > 0) or (
        threads_busy is not None and threads_busy()
    )
    for handle in ready:
        if (
            not handle._cancelled
            and getattr(handle._callback, "__func__", handle._callback) not in _bookkeeping_callbacks
        ):
            return "ready"
    if threads:
        return "waiting"
    for handle in scheduled:
        if not handle._cancelled and getattr(handle._callback, "__func__", handle._callback) not in _quiet_callbacks:
            return "waiting"
    try:
        wake_fd = wakeup.fileno()
        if any(key.fd != wake_fd for key in selector.get_map().values()):
            return "waiting"
    except (AttributeError, RuntimeError, ValueError):
        return "unknown"
    return "quiet"
