"""``trl-envs grpo`` / ``trl-envs dpo`` run the training scripts, as ``trl grpo`` runs TRL's."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(
        [sys.executable, "-m", "trl_envs", *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=240
    )


@pytest.mark.parametrize("command, option", [("grpo", "--num_generations"), ("dpo", "--num_rounds")])
def test_command_is_the_script(command, option):
    proc = run_cli(command, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert option in proc.stdout and "--env_name" in proc.stdout


def test_command_passes_the_scripts_exit_status():
    proc = run_cli("grpo", "--max_steps", "many")  # argparse's usage error: status 2
    assert proc.returncode == 2 and "--max_steps" in proc.stderr


def test_top_level_help_lists_them():
    proc = run_cli("--help")
    assert "grpo" in proc.stdout and "dpo" in proc.stdout and "show" in proc.stdout
