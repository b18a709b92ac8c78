"""Helpers for tests that launch real multi-process jobs (``accelerate launch`` / ``torchrun``) on the CPU.

A hang must FAIL the test, not stall CI: every launch has a hard timeout, after which the launcher and all its
descendant processes are killed and the test fails with the tail of the output.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "accelerate_configs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        TRL_EXPERIMENTAL_SILENCE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    for key in [k for k in env if k.startswith(("ACCELERATE_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_"))]:
        del env[key]  # nothing from an enclosing launch leaks into ours
    return env


def run_with_timeout(cmd: list[str], timeout_s: float, log_path: Path) -> str:
    """Run ``cmd``; on timeout kill the launcher and its workers and fail; on a non-zero exit fail. Returns the
    output."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=launch_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except BaseException as e:  # the timeout, or pytest-timeout / Ctrl-C interrupting the wait
            kill_tree(proc)
            if not isinstance(e, subprocess.TimeoutExpired):
                raise
            pytest.fail(
                f"multi-process run did not finish within {timeout_s:.0f}s (hang?): {' '.join(cmd)}\n"
                f"--- last output ---\n{_tail(log_path)}"
            )
    output = log_path.read_text(errors="replace")
    if rc != 0:
        pytest.fail(
            f"multi-process run failed with exit code {rc}: {' '.join(cmd)}\n--- last output ---\n{_tail(log_path)}"
        )
    return output


def kill_tree(proc: subprocess.Popen) -> None:
    """Stop the launcher and every process below it. torchrun starts each worker in a session of its own, so killing
    the launcher's process group is not enough: the descendants are collected first, then terminated, then killed."""
    import psutil

    try:
        procs = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def accelerate_launch(
    config: str, script: str, script_args: list[str], *, timeout_s: float, log_path: Path, launch_args: list[str] = ()
) -> str:
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(CONFIGS / config),
        "--main_process_port",
        str(free_port()),
        *launch_args,
        str(REPO / script),
        *script_args,
    ]
    return run_with_timeout(cmd, timeout_s, log_path)


def accelerate_launch_machines(
    config: str,
    script: str,
    script_args: list[str],
    *,
    num_machines: int,
    timeout_s: float,
    log_dir: Path,
    launch_args: list[str] = (),
) -> None:
    """``num_machines`` launches of ``config`` on this machine, as if on as many machines: the same command with
    ``--num_machines``, its own ``--machine_rank`` and the main machine at ``127.0.0.1`` on one free port; all run at
    once (the workers meet at the rendezvous). Every launch must exit 0 within ``timeout_s``, else all are killed and
    the test fails with the tail of each machine's log (``log_dir/machine<k>.log``)."""
    port = str(free_port())
    procs, logs = [], []
    try:
        for rank in range(num_machines):
            cmd = [
                sys.executable,
                "-m",
                "accelerate.commands.launch",
                "--config_file",
                str(CONFIGS / config),
                "--num_machines",
                str(num_machines),
                "--machine_rank",
                str(rank),
                "--main_process_ip",
                "127.0.0.1",
                "--main_process_port",
                port,
                *launch_args,
                str(REPO / script),
                *script_args,
            ]
            logs.append(log_dir / f"machine{rank}.log")
            with open(logs[-1], "w") as log:
                procs.append(
                    subprocess.Popen(
                        cmd, cwd=REPO, env=launch_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        deadline = time.monotonic() + timeout_s
        codes = [proc.poll() for proc in procs]
        # until all exited, one failed (the others would wait for it at the next collective), or the time is up
        while None in codes and not any(codes) and time.monotonic() < deadline:
            time.sleep(0.5)
            codes = [proc.poll() for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_tree(proc)
    tails = "\n".join(f"--- machine {k} ---\n{_tail(log, 3000)}" for k, log in enumerate(logs))
    if any(codes):
        pytest.fail(f"{num_machines}-machine run failed, exit codes {codes} (None: still running)\n{tails}")
    if None in codes:
        pytest.fail(f"{num_machines}-machine run did not finish within {timeout_s:.0f}s (hang?)\n{tails}")


def torchrun(script: str, script_args: list[str], *, nproc: int, timeout_s: float, log_path: Path) -> str:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--master_port",
        str(free_port()),
        str(REPO / script),
        *script_args,
    ]
    return run_with_timeout(cmd, timeout_s, log_path)


def read_ranks(out_dir: Path, world_size: int) -> list[dict]:
    """Every rank's JSON, in rank order; fails naming the ranks that wrote none (did not finish)."""
    missing = [r for r in range(world_size) if not (out_dir / f"rank{r}.json").exists()]
    if missing:
        pytest.fail(f"ranks {missing} wrote no result (did not finish)")
    return [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(world_size)]


def _tail(path: Path, chars: int = 6000) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-chars:]
