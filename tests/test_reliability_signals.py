"""Signals as a user meets them: SIGTERM (what schedulers, Kubernetes and ``timeout`` send) takes Ctrl-C's path in
the rollout engine, both training scripts, ``trl-envs eval`` and ``trl-envs play``: every env in flight is cleaned up,
one line says what stopped the run, the exit status is 143 (130 for Ctrl-C); a second signal exits at once. The
commands run as subprocesses on the tiny model; envs that misbehave on purpose come from tests/reliability_envs.py.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def env_for(tmp_path, **extra) -> dict:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)]),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "RELIABILITY_DIR": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def count(tmp_path, kind: str) -> int:
    return sum(1 for p in tmp_path.iterdir() if p.name.startswith(kind + "-"))


def wait_for(condition, process, timeout=120.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            out, err = process.communicate()
            pytest.fail(f"the command ended ({process.returncode}) before the condition held:\n{out}\n{err}")
        if time.monotonic() > end:
            process.kill()
            pytest.fail("timed out waiting for the command")
        time.sleep(0.1)


def rollout_in_flight(tmp_path):
    return lambda: count(tmp_path, "started") > count(tmp_path, "cleaned")


def interrupt(process, signum=signal.SIGTERM, timeout=60.0) -> tuple[int, str]:
    process.send_signal(signum)
    _, err = process.communicate(timeout=timeout)
    return process.returncode, err


def start(argv: list[str], tmp_path, **popen) -> subprocess.Popen:
    """``python *argv`` in ``tmp_path`` with the reliability envs importable, its output captured."""
    return subprocess.Popen(
        [sys.executable, *argv],
        env=env_for(tmp_path),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        **popen,
    )


def train_grpo_sleepy(model_path, out, *more: str) -> list[str]:
    """scripts/train_grpo.py on the tiny model and envs whose steps sleep 60 s: a training run to interrupt."""
    return [
        str(REPO / "scripts" / "train_grpo.py"),
        "--model_name_or_path",
        model_path,
        "--env",
        "reliability_envs:sleepy",
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--groups_per_batch",
        "2",
        "--max_steps",
        "2",
        "--output_dir",
        str(out),
        "--use_cpu",
        "true",
        *more,
    ]


ROLLOUT_SNIPPET = """
import reliability_envs
from trl_envs import Renderer, TokensWithLogprobs, run_rollout_batch
from trl_envs.cli.errors import run_command
from trl_envs.tiny_model import build_tiny_model
from transformers import AutoTokenizer

renderer = Renderer(AutoTokenizer.from_pretrained(build_tiny_model()))

class Sampler:
    def sample(self, requests):
        return [TokensWithLogprobs([renderer.end_of_turn_token_id], None) for _ in requests]

def body():
    train, _ = __import__("asyncio").run(reliability_envs.sleepy(renderer, group_size=2, batch_size=3)())
    run_rollout_batch(list(train.get_batch(0)), Sampler())

raise SystemExit(run_command("demo", body))
"""


def test_sigterm_during_a_rollout_cleans_up_every_env_and_exits_143(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-c", ROLLOUT_SNIPPET],
        env=env_for(tmp_path),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(lambda: count(tmp_path, "started") == 3, process)
    code, err = interrupt(process)
    assert code == 143, err
    assert count(tmp_path, "cleaned") == 3  # every group's cleanup() ran
    assert "demo: stopped by SIGTERM" in err and "Traceback" not in err


def test_a_second_signal_exits_at_once(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-c", ROLLOUT_SNIPPET],
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env_for(tmp_path, RELIABILITY_CLEANUP_S="60"),
    )
    wait_for(lambda: count(tmp_path, "started") == 3, process)
    process.send_signal(signal.SIGTERM)
    time.sleep(1.0)  # cleanups now wait 60 s
    start = time.monotonic()
    code, err = interrupt(process, signal.SIGTERM, timeout=20)
    assert code == 143 and time.monotonic() - start < 10
    assert "SIGTERM again: exiting at once" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["eval", "train_grpo.py", "train_dpo.py"])
def test_commands_take_sigterm_like_ctrl_c(command, tmp_path, tiny_model_path):
    out = tmp_path / "out"
    out.mkdir()
    if command == "eval":
        argv = [
            "-m",
            "trl_envs",
            "eval",
            "--model",
            tiny_model_path,
            "--env",
            "reliability_envs:sleepy",
            "--num_problems",
            "2",
            "--samples_per_problem",
            "2",
            "--output",
            "",
            "--no_progress",
        ]
    elif command == "train_grpo.py":
        argv = train_grpo_sleepy(tiny_model_path, out)
    else:
        argv = [
            str(REPO / "scripts" / command),
            "--model_name_or_path",
            tiny_model_path,
            "--env",
            "reliability_envs:sleepy",
            "--group_size",
            "2",
            "--groups_per_round",
            "2",
            "--num_rounds",
            "2",
            "--output_dir",
            str(out),
            "--use_cpu",
            "true",
        ]
    process = start(argv, tmp_path)
    wait_for(rollout_in_flight(tmp_path), process)
    code, err = interrupt(process)
    assert code == 143, err[-3000:]
    assert count(tmp_path, "cleaned") == count(tmp_path, "started")
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    assert not (out / "README.md").exists()  # no model card for a run that did not finish


def test_play_stops_at_the_first_ctrl_c_without_traceback(tmp_path, tiny_model_path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trl_envs",
            "play",
            "reliability_envs:constant",
            "--model_name_or_path",
            tiny_model_path,
        ],
        env=env_for(tmp_path),
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    wait_for(lambda: count(tmp_path, "started") == 1, process)
    time.sleep(0.5)  # now waiting for the typed answer
    code, err = interrupt(process, signal.SIGINT, timeout=20)
    assert code == 130, err
    assert "trl-envs play: stopped by SIGINT" in err and "Traceback" not in err
    assert "play saves nothing, so nothing was lost" in err and "no model saved" not in err


def test_ctrl_c_in_a_terminal_stops_async_training_and_its_sampler_process(tmp_path, tiny_model_path):
    """Ctrl-C reaches every process of the terminal's foreground group, the sampler process of ``--max_staleness``
    too: the trainer stops the pipeline (every env cleaned up) and the sampler process, exits 130 within 20 s, the
    output_dir lock is released, and nothing of the group is left running."""
    out = tmp_path / "out"
    out.mkdir()
    argv = train_grpo_sleepy(tiny_model_path, out, "--max_staleness", "1")
    process = start(argv, tmp_path, start_new_session=True)  # its own process group, as a terminal's foreground job
    wait_for(rollout_in_flight(tmp_path), process)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=20)  # the promise: everything stops within 20 s (about 2 s on a CPU)
    assert process.returncode == 130, err[-3000:]
    from filelock import FileLock

    FileLock(str(out / ".trl_envs.lock")).acquire(timeout=0)  # the output_dir lock was released
    assert count(tmp_path, "cleaned") == count(tmp_path, "started")
    assert "Traceback" not in err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)  # anything of the group still running?
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("a process of the training run's group is still running after it exited")
