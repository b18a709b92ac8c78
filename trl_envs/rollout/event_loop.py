"""Long-lived asyncio event loops for rollouts, and :func:`run_sync` to run coroutines on them from sync code.

The trainers call into async rollout code once or more per training step, so no loop, thread or thread pool is made
per call (why: docs/DESIGN.md, "One long-lived event loop"):

* A thread that runs no loop (a trainer, a script) runs the coroutine itself, on its own long-lived
  ``asyncio.Runner``, kept across calls: no loop, thread or pool is made per call, and no thread hop.
* A thread that already runs a loop (Jupyter, a coroutine calling :func:`run_sync`) hands the coroutine to ONE rollout
  loop running forever in a daemon thread (``trl_envs-rollout-loop``) and blocks on the result. A coroutine on that
  thread calling :func:`run_sync` again gets a fresh loop on a helper thread (blocking it would deadlock).
* Blocking calls made from rollouts that must not stop the loop (a sampler call forced by the batcher's valve while
  an episode is still busy in env code, see ``trl_envs.rollout.batching``) go to one reused thread pool
  (:func:`run_blocking`). A complete batch's sampler call runs on the loop's own thread instead: no hand-off.
* Loops and pool are closed at interpreter exit (``atexit``) or by :func:`close_rollout_loop`. Fork-safe: a forked
  child never touches its parent's loops (their epoll and self-pipe fds are shared) and starts its own.
* The caller's ``contextvars`` are visible to the coroutine (it runs in a copy of the caller's context, as with
  ``asyncio.run``). Errors propagate as raised by the coroutine, with no event-loop plumbing chained to them;
  Ctrl-C in the caller cancels the coroutine and lets it unwind before re-raising.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import gc
import os
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_CANCEL_GRACE_S = 5.0


class _RolloutLoop:
    """An event loop running forever in a daemon thread of the process that created it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), name="trl_envs-rollout-loop", daemon=True)
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T], context: contextvars.Context) -> concurrent.futures.Future:
        """Schedule ``coro`` as a task created inside ``context`` (so the task runs in a copy of it). Cancelling
        the returned future cancels the task."""
        result: concurrent.futures.Future = concurrent.futures.Future()

        def start() -> None:
            if result.cancelled():
                coro.close()
                return
            task = context.run(self.loop.create_task, _deliver(coro, result))
            result.add_done_callback(lambda f: f.cancelled() and self._call_soon(task.cancel))

        self.loop.call_soon_threadsafe(start)
        return result

    def _call_soon(self, fn: Callable[[], Any]) -> None:
        try:
            self.loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop was closed meanwhile (interpreter exit): nothing left to cancel
            pass

    def close(self) -> None:
        """Cancel what is still running, stop the loop, join its thread and close it."""
        if self.loop.is_closed():
            return
        if self.thread.is_alive():

            async def shutdown() -> None:
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await self.loop.shutdown_asyncgens()
                await self.loop.shutdown_default_executor()

            try:
                asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout=_CANCEL_GRACE_S)
            except (concurrent.futures.TimeoutError, RuntimeError):
                pass
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=_CANCEL_GRACE_S)
        if not self.thread.is_alive():
            self.loop.close()


async def _deliver(coro: Coroutine[Any, Any, T], result: concurrent.futures.Future) -> None:
    """Await ``coro`` and hand its outcome to ``result``. Every exception goes to the caller, KeyboardInterrupt and
    SystemExit included (raised out of a task they would stop the loop and leave the caller waiting forever)."""
    try:
        value = await coro
    except asyncio.CancelledError:
        result.cancel()
        raise
    except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread by result.result()
        _settle(result.set_exception, e)
    else:
        _settle(result.set_result, value)


def _settle(setter: Callable[[Any], None], value: Any) -> None:
    try:
        setter(value)
    except concurrent.futures.InvalidStateError:  # the caller cancelled it meanwhile
        pass


_lock = threading.Lock()
_loop: _RolloutLoop | None = None
_executor: concurrent.futures.ThreadPoolExecutor | None = None
_EXECUTOR_THREADS = (
    4  # a sampler call per batcher in flight; >1 so nested or concurrent batchers never wait on each other
)


def blocking_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The process's thread pool for blocking calls made from rollout coroutines (the sampler calls that must not
    stop the loop): created once, on first use, and reused, so no thread is started or joined per call."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(_EXECUTOR_THREADS, thread_name_prefix="trl_envs-sampler")
        return _executor


_blocking_in_flight = 0
_blocking_lock = threading.Lock()


async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """``await`` ``fn(*args)`` run in :func:`blocking_executor`, in a copy of the caller's ``contextvars`` (as
    ``asyncio.to_thread``, without its per-loop default pool)."""
    global _blocking_in_flight
    context = contextvars.copy_context()
    with _blocking_lock:
        _blocking_in_flight += 1
    try:
        return await asyncio.get_running_loop().run_in_executor(blocking_executor(), context.run, fn, *args)
    finally:
        with _blocking_lock:
            _blocking_in_flight -= 1


def blocking_calls_in_flight() -> int:
    """How many :func:`run_blocking` calls have not yet returned to their awaiting coroutine (any loop)."""
    return _blocking_in_flight


def _rollout_loop() -> _RolloutLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.pid != os.getpid() or not _loop.thread.is_alive():
            _loop = _RolloutLoop()
        return _loop


def close_rollout_loop() -> None:
    """Stop and close this process's loops (the rollout loop thread and every thread's ``Runner``) and its
    blocking-call pool. The next :func:`run_sync` starts new ones. Called at interpreter exit; call it yourself only
    to release them earlier."""
    global _loop, _executor
    with _lock:
        loop, _loop = _loop, None
        executor, _executor = _executor, None
        runners = [r for r in _all_runners]
        _all_runners.clear()
    if loop is not None and loop.pid == os.getpid():
        loop.close()
    for runner in runners:
        with contextlib.suppress(RuntimeError):  # one running right now (close called from inside it) stays open
            runner.close()
    if executor is not None:
        executor.shutdown(wait=False, cancel_futures=True)


def _forget_after_fork() -> None:
    global _loop, _lock, _executor
    _executor = None  # its threads do not exist in the child either
    _loop = None  # the parent's loop thread does not exist in the child; never touch its loop
    _lock = threading.Lock()
    _all_runners.clear()  # the child must not close the parent's loops (their fds are shared)


atexit.register(close_rollout_loop)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


_runners = threading.local()  # this thread's asyncio.Runner (its long-lived loop)
_all_runners: list = []  # the open ones, closed at exit (emptied in a forked child: the parent's are not its own)


def _thread_runner() -> asyncio.Runner:
    runner = getattr(_runners, "runner", None)
    with _lock:
        if runner is None or runner not in _all_runners:  # none yet, closed, or inherited across fork
            runner = asyncio.Runner()
            _runners.runner = runner
            _all_runners.append(runner)
    return runner


def _caller_runs_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _into(box: list, coro: Coroutine[Any, Any, T]) -> None:
    """Await ``coro`` into ``box``, so the task's own result is ``None``: ``asyncio.Runner.run`` ends by calling
    ``signal.getsignal``, which (CPython 3.11-3.12) builds the repr of its SIGINT handler, a partial holding the
    task, whose repr holds the task's result: the repr of a whole rollout batch."""
    box.append(await coro)


def run_sync(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine ``make_coro()`` to completion and return its result, on a long-lived event loop.

    From a thread that runs no event loop (a trainer, a script), the coroutine runs right in the calling thread, on
    that thread's long-lived loop (an ``asyncio.Runner`` kept across calls: no loop or thread pool is made per call,
    and no thread hop). From a thread that already runs a loop (Jupyter, or a coroutine calling ``run_sync``), it
    runs on the process's rollout loop thread and the caller blocks on the result. Called from a coroutine on that
    rollout loop thread itself, it runs in a fresh loop on a helper thread.
    """
    if not _caller_runs_a_loop() and hasattr(asyncio, "Runner"):
        box: list[T] = []
        _thread_runner().run(_into(box, make_coro()), context=contextvars.copy_context())
        return box[0]
    loop = _rollout_loop()
    if threading.current_thread() is loop.thread:
        return _run_on_helper_thread(make_coro)
    future = loop.submit(make_coro(), contextvars.copy_context())
    try:
        return future.result()
    except BaseException:
        if not future.done():  # interrupted here (Ctrl-C): cancel the coroutine and let it unwind
            future.cancel()
            try:
                future.result(timeout=_CANCEL_GRACE_S)
            except BaseException:  # noqa: BLE001 - the original interruption is what the caller gets
                pass
        raise


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block (restored after, also on error).

    A large rollout batch allocates enough container objects (coroutines, futures, token lists, transitions) to
    trigger several full collections, each walking the whole heap (torch, transformers and TRL modules included).
    Rollout garbage is almost all freed by reference counting, so the collector is paused while the batch runs and
    runs normally afterwards: one collection instead of several. Nested use and a collector already disabled by the
    caller are respected."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _run_on_helper_thread(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    box: dict[str, Any] = {}
    context = contextvars.copy_context()

    def target() -> None:
        try:
            box["value"] = context.run(asyncio.run, make_coro())
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target, name="trl_envs-nested-run-sync")
    thread.start()
    thread.join()
    if "error" in box:
        error = box.pop("error")
        raise error
    return box["value"]
