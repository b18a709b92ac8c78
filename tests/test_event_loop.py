"""The long-lived rollout event loop behind ``run_sync`` (trl_envs.rollout.event_loop)."""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
import threading
import traceback

import pytest

from trl_envs.rollout.event_loop import close_rollout_loop, run_blocking, run_sync


async def _loop_and_thread():
    return asyncio.get_running_loop(), threading.current_thread()


def test_one_long_lived_loop_serves_every_call_in_the_calling_thread():
    first = run_sync(_loop_and_thread)
    second = run_sync(_loop_and_thread)
    assert first[0] is second[0] and not first[0].is_closed()
    assert first[1] is second[1] is threading.current_thread()  # no thread hop per call


def test_each_thread_keeps_its_own_loop():
    seen = []
    worker = threading.Thread(target=lambda: seen.extend([run_sync(_loop_and_thread), run_sync(_loop_and_thread)]))
    worker.start()
    worker.join()
    assert seen[0][0] is seen[1][0] and seen[0][0] is not run_sync(_loop_and_thread)[0]


def test_errors_propagate_without_event_loop_noise():
    async def boom():
        raise ValueError("env exploded")

    with pytest.raises(ValueError, match="env exploded") as info:
        run_sync(boom)
    assert info.value.__context__ is None and info.value.__cause__ is None
    text = "".join(traceback.format_exception(info.value))
    assert "no running event loop" not in text and "During handling" not in text


def test_base_exceptions_reach_the_caller_and_the_loop_survives():
    async def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sync(interrupt)
    assert run_sync(_loop_and_thread)[1].is_alive()


def test_callers_contextvars_are_visible():
    var = contextvars.ContextVar("test_var", default="unset")

    async def read():
        return var.get()

    token = var.set("caller's value")
    try:
        assert run_sync(read) == "caller's value"
    finally:
        var.reset(token)
    assert run_sync(read) == "unset"


def test_works_inside_a_running_loop_and_nested():
    async def inner():
        return 7

    async def outer():  # runs on the rollout loop thread; a nested run_sync must not deadlock it
        return run_sync(inner) + 1

    async def notebook_cell():  # a caller that already runs its own loop (Jupyter)
        first, second = run_sync(_loop_and_thread), run_sync(_loop_and_thread)
        assert first == second and first[1] is not threading.current_thread()  # the one rollout loop thread
        return run_sync(outer)

    assert asyncio.run(notebook_cell()) == 8
    assert run_sync(outer) == 8  # nested from the calling thread's loop


def test_blocking_calls_reuse_threads():
    async def names():
        return {await run_blocking(lambda: threading.current_thread().name) for _ in range(20)}

    assert len(run_sync(names)) <= 4


def test_close_then_reuse():
    old, _ = run_sync(_loop_and_thread)
    close_rollout_loop()
    loop, thread = run_sync(_loop_and_thread)
    assert old.is_closed() and thread.is_alive() and not loop.is_closed()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_gets_its_own_loop():
    parent_loop, _ = run_sync(_loop_and_thread)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: must not hang on the parent's (absent) loop thread
        try:
            loop, thread = run_sync(_loop_and_thread)
            ok = loop is not parent_loop and thread.is_alive() and run_sync(_loop_and_thread)[0] is loop
            os.write(write, b"ok" if ok else b"no")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 2) == b"ok" and status == 0


def test_interpreter_exits_promptly_with_the_loop_started():
    import trl_envs.rollout.event_loop as module

    code = (
        "import importlib.util\n"  # the module alone: importing trl_envs (torch, transformers) takes seconds
        f"spec = importlib.util.spec_from_file_location('event_loop', {module.__file__!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "async def f():\n    return 1\nprint(m.run_sync(f))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr
    assert "Traceback" not in out.stderr and "Task was destroyed" not in out.stderr
