"""A fault on one rank of a real two-process run (``accelerate launch``, CPU, gloo): the env of rank 1 raises on its
first step. Both ranks end non-zero and promptly -- rank 0 is not left waiting in a collective -- and the output
names the env's error and the rank it happened on.
"""

import os
import subprocess
import sys
import time

from mp_launch import CONFIGS, REPO, free_port, kill_tree, launch_env

TESTS = REPO / "tests"
LIMIT_S = 300  # far above a normal run's 20-45 s on 2 shared cores: only a rank waiting forever reaches it


def test_an_env_error_on_one_rank_ends_both_ranks_non_zero_naming_it(tmp_path, tiny_model_path):
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(CONFIGS / "cpu_2proc.yaml"),
        "--main_process_port",
        str(free_port()),
        str(REPO / "scripts" / "train_grpo.py"),
        "--model_name_or_path",
        tiny_model_path,
        "--env",
        "reliability_envs:failing_on_rank",
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "2",
        "--max_steps",
        "3",
        "--output_dir",
        str(tmp_path / "out"),
    ]
    env = {**launch_env(), "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    log = tmp_path / "log.txt"
    with open(log, "w") as out:
        process = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            process.wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            kill_tree(process)
            raise AssertionError(f"a rank was still running after {LIMIT_S} s:\n{log.read_text()[-4000:]}") from None
    output = log.read_text(errors="replace")
    assert process.returncode != 0, output[-4000:]
    assert "[rank1]: RuntimeError: the env's server is down" in output, output[-4000:]  # the launcher's rank prefix
    assert "[rank0]: RuntimeError: the env's server is down" not in output
    root_cause = output[output.index("Root Cause") :]
    assert "rank      : 1" in root_cause and "exitcode  : 1" in root_cause, root_cause
    time.sleep(0.5)
    try:
        os.killpg(process.pid, 0)
        raise AssertionError("a process of the launch is still running after the launcher exited")
    except ProcessLookupError:
        pass
