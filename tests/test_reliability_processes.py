"""The processes of a run, faulted as it happens: the sampler process of ``--max_staleness`` killed mid-run (SIGKILL
from outside, as the kernel's out-of-memory killer does) stops the run with one line naming it and its exit, exit
status 1, no traceback and nothing left running; stopping the sampler never waits for a ``generate`` call whose
answer nobody needs; every run -- async or not -- leaves no process behind when it exits. The training script runs
as a subprocess in its own process group, on the tiny model; envs from tests/reliability_envs.py.
"""

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import reliability_envs
from test_reliability_signals import count, start, train_grpo_sleepy, wait_for
from transformers import AutoTokenizer

from trl_envs import SampleRequest
from trl_envs.samplers.process import SamplerProcess, SamplerProcessDied


def children_of(pid: int) -> list[tuple[int, str]]:
    """``(pid, command line)`` of each live child process of ``pid`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            found.append((int(entry.name), cmdline))
    return found


def sampler_child(pid: int) -> int | None:
    return next((child for child, cmd in children_of(pid) if "spawn_main" in cmd), None)


def group_gone(pgid: int, within_s: float = 10.0) -> bool:
    """Whether every process of group ``pgid`` has ended within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def async_run(model_path, out, *more: str) -> list[str]:
    """An async training run (``--max_staleness 1``) on an env with mixed rewards, long enough to be killed in."""
    argv = train_grpo_sleepy(model_path, out, "--max_staleness", "1", *more)
    argv[argv.index("reliability_envs:sleepy")] = "reliability_envs:spread"
    argv += ["--env_kwargs", '{"scale": 1.0}', "--num_env_batches", "400"]
    return argv


def test_a_killed_sampler_process_stops_the_run_with_one_line_and_no_orphan(tmp_path, tiny_model_path):
    out = tmp_path / "out"
    argv = async_run(tiny_model_path, out)
    argv[argv.index("--max_steps") + 1] = "400"
    process = start(argv, tmp_path, start_new_session=True)
    wait_for(lambda: sampler_child(process.pid) is not None and count(tmp_path, "started") >= 4, process, 300)
    child = sampler_child(process.pid)
    os.kill(child, signal.SIGKILL)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    line = next(line for line in err.splitlines() if line.startswith("train_grpo.py: error:"))
    assert f"the sampler process (pid {child}" in line and "killed by SIGKILL (exit code -9" in line, line
    assert "output above" not in line  # it printed nothing: the message does not point at output that is not there
    assert group_gone(process.pid), "a process of the run is still running after it exited"
    assert not (out / "README.md").exists()


def test_stopping_the_sampler_process_does_not_wait_for_a_generate_call_in_flight(
    tmp_path, tiny_model_path, monkeypatch
):
    """What blocked an async run's exit on a GPU: the prefetched batch's ``generate`` still running when training
    ended. ``close`` terminates the child after a short grace; the waiting call raises instead of hanging."""
    monkeypatch.setenv("RELIABILITY_DIR", str(tmp_path))
    monkeypatch.setenv("RELIABILITY_FORWARD_S", "300")  # far longer than close may take
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    sampler = SamplerProcess(reliability_envs.SlowForwardLM.from_pretrained(tiny_model_path), tokenizer, version=0)
    raised = []

    def call():
        try:
            sampler.sample([SampleRequest(prompt=[5, 6, 7], stop=[], max_tokens=4)])
        except BaseException as error:  # noqa: BLE001 - what the waiting call ends with
            raised.append(error)

    waiting = threading.Thread(target=call, daemon=True)
    waiting.start()
    end = time.monotonic() + 120
    while count(tmp_path, "forward") == 0 and time.monotonic() < end:  # the child is inside generate
        time.sleep(0.1)
    assert count(tmp_path, "forward") >= 1
    began = time.monotonic()
    sampler.close()
    assert time.monotonic() - began < 60  # not the 300 s of the call in flight
    assert not sampler.is_running()
    waiting.join(30)
    assert not waiting.is_alive() and isinstance(raised[0], SamplerProcessDied), raised


@pytest.mark.parametrize("staleness", ["0", "1"])
def test_a_finished_run_leaves_no_process_behind(staleness, tmp_path, tiny_model_path):
    out = tmp_path / "out"
    argv = async_run(tiny_model_path, out)
    argv[argv.index("--max_staleness") + 1] = staleness
    process = start(argv, tmp_path, start_new_session=True)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    assert (out / "README.md").exists()
    assert group_gone(process.pid), "a process of the run is still running after it exited"


BLOCKED_EXIT = """
import threading, time
from trl_envs.cli.errors import bound_exit

threading.Thread(target=time.sleep, args=(3600,), name="stuck-uploader").start()  # not a daemon: exit waits for it
print("work done", flush=True)
bound_exit("demo", 0, grace_s=2)
"""


def test_a_finished_command_exits_even_when_a_thread_would_hold_it(tmp_path):
    """Whatever would keep the interpreter from exiting once the work is done (a non-daemon thread here; a thread
    pool or a child process alike), the process ends within the grace period and names it."""
    process = start(["-c", BLOCKED_EXIT], tmp_path)
    out, err = process.communicate(timeout=120)  # not the thread's 3600 s
    assert process.returncode == 0 and out == "work done\n", err
    assert "demo: the process had not exited 2 s after its work ended (still running: threads stuck-uploader)" in err


WORK_GOES_ON = """
import time
from trl_envs.cli.errors import bound_exit

bound_exit("demo", 3, grace_s=1)  # a script run in-process (a test suite, a notebook): its caller goes on working
time.sleep(4)
print("caller still working", flush=True)
"""


def test_the_exit_bound_never_cuts_short_a_process_that_goes_on_working(tmp_path):
    """The grace period starts when the main thread ends: a script run in-process (``runpy``, as some tests do) must
    not end its caller with the script's status seconds later."""
    process = start(["-c", WORK_GOES_ON], tmp_path)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0 and out == "caller still working\n", err
