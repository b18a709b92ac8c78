"""verifiers (``verifiers.v1``) environments train unchanged: environments written here (tests/fixtures/verifiers_envs:
single turn with a reward function, a multi-turn game where the env plays the user, a tool-using env with an MCP
toolset) run their own episodes against the policy endpoint, scored by their own rubric; ``verifiers/<id>`` trains
one GRPO step from the command line and ``trl-envs eval`` plays its held-out split; bad names and a missing package
end in one line.

The rollout scenarios run together in one fresh interpreter, the commands each in their own: verifiers 0.4 needs
mcp 2 (its built-in tasksets and tool servers import ``mcp.server.mcpserver``), while OpenEnv's client in the same
venv may need mcp < 2. Where the test interpreter's own mcp is older, mcp 2 is taken from the folder
``TRL_ENVS_TEST_VERIFIERS_PATH`` names (default ``.test-sites/mcp2`` in the repository, made by the README's test line
from tests/requirements-mcp2.txt) and put first on those interpreters' ``PYTHONPATH``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("verifiers") is None or importlib.util.find_spec("verifiers.v1") is None:
    pytest.skip("needs verifiers 0.4 (pip install 'trl-envs[verifiers]')", allow_module_level=True)
pytest.importorskip("uvicorn")

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "verifiers_envs"


def _mcp2_path() -> list[str]:
    try:
        if importlib.util.find_spec("mcp.server.mcpserver") is not None:
            return []
    except ImportError:
        pass
    site = Path(os.environ.get("TRL_ENVS_TEST_VERIFIERS_PATH", REPO / ".test-sites" / "mcp2"))
    if not (site / "mcp" / "server" / "mcpserver").exists():
        pytest.skip(
            f"verifiers needs mcp 2, which neither this Python nor {site} has (pip install --no-deps --upgrade "
            f"--target {site} -r tests/requirements-mcp2.txt)",
            allow_module_level=True,
        )
    return [str(site)]


MCP2 = _mcp2_path()


def run(args: list[str], *, with_fixtures: bool = True, extra_path: list[str] = (), timeout: int = 300, cwd=None):
    path = [*extra_path, *MCP2, str(REPO), *([str(FIXTURES)] if with_fixtures else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd or REPO
    )


SCENARIOS = {
    "echo": ["vf_echo", "--policy", "echo", "--batch_size", "2", "--group_size", "3"],
    "echo_wrong_as_object": ["vf_echo", "--policy", "wrong", "--batch_size", "1", "--group_size", "2", "--as_object"],
    "guess": ["vf_guess", "--policy", "guess", "--batch_size", "2", "--group_size", "2"],
    "guess_cut_at_2_turns": [
        "vf_guess", "--policy", "guess", "--batch_size", "2", "--group_size", "2", "--max_turns", "2",
    ],
    "calc": ["vf_calc", "--policy", "calc", "--batch_size", "2", "--group_size", "2"],
    "echo_test_split": [
        "vf_echo", "--policy", "echo", "--batch_size", "2", "--group_size", "1", "--split", "test",
        "--env_kwargs", '{"test_taskset": {"split": "test"}}',
    ],
    "split_counts": ["split_counts"],
    "broken_rubric": ["vf_echo", "--policy", "echo", "--batch_size", "1", "--env_kwargs", '{"broken_rubric": true}'],
}  # fmt: skip


@pytest.fixture(scope="module")
def scenarios() -> dict:
    """Every scenario of SCENARIOS, played in one fresh interpreter (tests/verifiers_rollouts.py --scenarios)."""
    out = run([str(REPO / "tests" / "verifiers_rollouts.py"), "--scenarios", json.dumps(SCENARIOS)], timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def rollouts(scenarios):
    """The result of the scenario called ``name`` (it must have run without an error)."""

    def result(name: str) -> dict:
        assert "error" not in scenarios[name], scenarios[name]["error"][-3000:]
        return scenarios[name]["result"]

    return result


def test_single_turn_env_groups_and_rewards_come_from_its_rubric(rollouts):
    result = rollouts("echo")
    assert result["errors"] == {} and not result["test_split"]
    assert [g["tags"] for g in result["groups"]] == [["vf_echo"], ["vf_echo"]]
    groups = [g["trajectories"] for g in result["groups"]]
    assert [len(g) for g in groups] == [3, 3]  # one group of group_size episodes per task
    assert all("Say the word apple." in t["text"] for t in groups[0])  # every episode of a group plays its task
    assert all("Say the word river." in t["text"] for t in groups[1])
    for trajectory in groups[0] + groups[1]:
        assert trajectory["reward"] == 1.0
        assert trajectory["metrics"]["said_the_word"] == 1.0  # the reward function, logged as a metric
        assert trajectory["metrics"]["reply_chars"] == 5.0  # the env's @vf.metric
        assert trajectory["metrics"]["agent_calls"] == 1.0

    wrong = rollouts("echo_wrong_as_object")
    assert [t["reward"] for t in wrong["groups"][0]["trajectories"]] == [0.0, 0.0]
    assert wrong["groups"][0]["trajectories"][0]["metrics"]["said_the_word"] == 0.0


def test_a_failed_episode_is_a_rollout_error_naming_the_env_and_task(scenarios):
    error = scenarios["broken_rubric"].get("error", "")
    assert "verifiers env 'vf_echo': episode of task 'apple' failed" in error
    assert "the rubric broke" in error


def test_importing_the_adapter_imports_no_verifiers():
    code = "import sys, trl_envs, trl_envs.registry, trl_envs.verifiers; print('verifiers' in sys.modules)"
    out = run(["-c", code])
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


def test_multi_turn_env_plays_the_user_and_scores_after_the_exchange(rollouts):
    result = rollouts("guess")
    assert result["errors"] == {}
    for group in result["groups"]:
        for trajectory in group["trajectories"]:
            guesses = trajectory["turns"]
            # the env's own run(): solved, plus its weighted few-guesses reward (weight 0.5)
            assert trajectory["metrics"]["solved"] == 1.0
            assert trajectory["reward"] == pytest.approx(1.0 + 0.5 * (1 - guesses / 8))
            assert trajectory["metrics"]["guesses"] == guesses == trajectory["metrics"]["agent_calls"]
            assert trajectory["extends"] and trajectory["metrics"]["history_rewrites"] == 0.0  # one token sequence
    texts = [t["text"] for g in result["groups"] for t in g["trajectories"]]
    assert any("Higher." in t or "Lower." in t for t in texts)  # the env's replies are in the trained sequence
    assert max(t["turns"] for g in result["groups"] for t in g["trajectories"]) > 1


def test_episode_cut_by_max_turns_is_scored_by_its_rubric_and_marked_truncated(rollouts):
    # 4 guesses allowed by the env, 2 by the trainer: task guess-0 (secret 3) needs 3 guesses, guess-1 (secret 6) 2
    result = rollouts("guess_cut_at_2_turns")
    assert result["errors"] == {}
    cut, solved = ([t for t in group["trajectories"]] for group in result["groups"])
    for trajectory in cut:
        assert trajectory["stop_reason"] == "max_turns" and trajectory["turns"] == 2
        metrics = trajectory["metrics"]
        # finalized and scored by the env's own run(): the rubric's rewards and metric are there, unsolved
        assert metrics["solved"] == 0.0 and metrics["few_guesses"] == 0.0 and metrics["guesses"] == 2.0
        assert metrics["truncated"] == 1.0 and trajectory["reward"] == 0.0
    for trajectory in solved:
        assert trajectory["stop_reason"] == "done" and trajectory["metrics"]["truncated"] == 0.0
        assert trajectory["reward"] == pytest.approx(1.0 + 0.5 * (1 - 2 / 8))
    assert result["processes_left"] == []


def test_tool_env_calls_its_mcp_tool_through_the_endpoint(rollouts):
    result = rollouts("calc")
    assert result["errors"] == {}
    for group in result["groups"]:
        for trajectory in group["trajectories"]:
            assert trajectory["metrics"]["tool_results"] == 1.0  # the toolset's answer came back as a tool message
            assert trajectory["metrics"]["correct"] == 1.0 and trajectory["reward"] == 1.0
            assert trajectory["turns"] == 2 and trajectory["extends"]
            assert '"name": "calc_add"' in trajectory["text"]
    assert "<|im_start|>tool\n30<|im_end|>" in result["groups"][0]["trajectories"][0]["text"]
    assert result["processes_left"] == []  # the tool server and every chat program stopped with the batch


def test_train_script_trains_one_grpo_step_by_name(tiny_model_path, tmp_path):
    out = run(
        [
            str(REPO / "scripts" / "train_grpo.py"),
            "--env",
            "verifiers/vf_echo",
            "--env_kwargs",
            '{"num_tasks": 4}',
            "--model_name_or_path",
            tiny_model_path,
            "--output_dir",
            str(tmp_path / "run"),
            "--max_steps",
            "1",
            "--num_generations",
            "2",
            "--per_device_train_batch_size",
            "4",
            "--max_completion_length",
            "8",
            "--max_turns",
            "2",
            "--card_eval",
            "false",
            "--logging_steps",
            "1",
        ],
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    history = json.loads((tmp_path / "run" / "log_history.json").read_text())
    logs = [h for h in history if "env/vf_echo/said_the_word" in h]
    assert len(logs) == 1  # the rubric's reward, logged under the env's tag
    assert logs[0]["env/vf_echo/agent_calls"] == 1.0


def test_trl_envs_eval_plays_the_held_out_split(tiny_model_path, tmp_path):
    code = "import sys; from trl_envs.cli.commands import main; sys.exit(main(sys.argv[1:]))"
    args = ["-c", code, "eval", "--env", "verifiers/vf_echo", "--model", tiny_model_path, "--max_tokens", "4"]
    split = ["--env_kwargs", '{"test_taskset": {"split": "test"}}', "--output", "eval_results.json"]
    out = run([*args, *split, "--no_progress"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "vf_echo" in out.stdout and "test split" in out.stdout
    results = json.loads((tmp_path / "eval_results.json").read_text())
    assert results["settings"]["env"] == "verifiers/vf_echo"
    # the test taskset's 2 words, each once (the builder's batches of 4 must not wrap round to 4 problems)
    assert (results["num_problems"], results["num_episodes"]) == (2, 8)
    no_split = run([*args, "--no_progress"], cwd=tmp_path)
    assert no_split.returncode == 2
    assert "no test split" in no_split.stderr and "Traceback" not in no_split.stderr


def test_held_out_split_is_the_test_taskset(rollouts):
    result = rollouts("echo_test_split")
    words = [g["trajectories"][0]["text"].split("Say the word ")[1].split(".")[0] for g in result["groups"]]
    assert sorted(words) == ["music", "paper"]  # the fixture's held-out words, never in its training split


def test_bad_names_options_and_a_missing_package_end_in_one_line(tmp_path):
    script = [str(REPO / "scripts" / "train_grpo.py"), "--max_steps", "1", "--env"]
    unknown = run([*script, "verifiers/vf_ecko"])
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    assert "unknown env 'verifiers/vf_ecko'" in unknown.stderr and "'vf_ecko'" in unknown.stderr
    bad_option = run([*script, "verifiers/vf_echo", "--env_kwargs", '{"num_taskz": 3}'])
    assert bad_option.returncode == 2 and "Traceback" not in bad_option.stderr
    assert "verifiers env 'vf_echo'" in bad_option.stderr and "num_taskz" in bad_option.stderr
    needs_a_package = run([*script, "verifiers/vf_needs_a_package"])
    assert needs_a_package.returncode == 2 and "Traceback" not in needs_a_package.stderr
    assert "No module named 'trl_envs_test_missing_dependency'" in needs_a_package.stderr
    stand_in = tmp_path / "site" / "verifiers"  # a verifiers without verifiers.v1 (an old release, or none)
    stand_in.mkdir(parents=True)
    (stand_in / "__init__.py").write_text("")
    missing = run([*script, "verifiers/vf_echo"], extra_path=[str(tmp_path / "site")])
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "pip install 'trl-envs[verifiers]'" in missing.stderr


def test_test_split_plays_each_held_out_task_once_whatever_the_batch_size(rollouts):
    splits = rollouts("split_counts")
    for size in (1, 2, 3, 5, 7):
        batches = splits[str(size)]
        words = [w for batch in batches for w in batch]
        assert len(words) == size == len(set(words)), batches  # the last `size` tasks, each once
        assert [len(b) for b in batches] == [4] * (size // 4) + ([size % 4] if size % 4 else [])
    assert splits["played"] == [3, 12, 1.0]  # 3 tasks x the default 4 samples, in batches of 2 and 1
