"""Agent programs train like any env: GRPO through the training script (``--env pkg.module:make_dataset``), the
built-in ``calculator_agent`` by name, ``trl-envs eval``, and episodes whose agent rewrites its history."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from trl_envs import EnvGRPOTrainer, Renderer  # noqa: E402
from trl_envs.agents import AgentDataset  # noqa: E402
from trl_envs.registry.names import make_env_dataset  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def test_train_script_trains_an_openai_client_agent_two_steps(tiny_model_path, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "train_grpo.py"),
            "--env",
            "examples.calculator_agent:make_dataset",
            "--model_name_or_path",
            tiny_model_path,
            "--output_dir",
            str(tmp_path / "run"),
            "--max_steps",
            "2",
            "--num_generations",
            "4",
            "--per_device_train_batch_size",
            "8",
            "--max_completion_length",
            "8",
            "--max_turns",
            "3",
            "--card_eval",
            "false",
            "--logging_steps",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    history = json.loads((tmp_path / "run" / "log_history.json").read_text())
    logs = [h for h in history if "env/calculator/agent_calls" in h]
    assert len(logs) == 2  # two GRPO steps, each rolled out through the endpoint
    assert all(h["env/calculator/agent_calls"] >= 1 for h in logs)


async def two_call_agent(base_url, api_key, task):
    """Asks, then asks again about a rewritten conversation (its prompts stop extending each other)."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client:
        first = await client.chat.completions.create(
            model="p", messages=[{"role": "user", "content": task}], max_tokens=4
        )
        text = first.choices[0].message.content or ""
        await client.chat.completions.create(
            model="p", max_tokens=4, messages=[{"role": "user", "content": f"{task} (you said: {text[:20]})"}]
        )
        return float(len(text) % 2)


def test_grpo_trains_per_call_rows_for_an_agent_that_rewrites_history(tiny_model_path, tokenizer, cpu_grpo_config):
    tasks = [f"What is {i} + 1?" for i in range(8)]
    dataset = AgentDataset(two_call_agent, tasks, Renderer(tokenizer), batch_size=2, group_size=4)
    trainer = EnvGRPOTrainer(tiny_model_path, cpu_grpo_config(max_turns=3), dataset, processing_class=tokenizer)
    trainer.train()
    groups = trainer.last_rollout.groups
    assert all(not t.observations_extend and len(t.transitions) == 2 for g in groups for t in g.trajectories)
    logged = [h for h in trainer.state.log_history if "env/agent/history_rewrites" in h]
    assert logged and logged[0]["env/agent/history_rewrites"] == 1.0


def test_builtin_calculator_agent_by_name_and_eval_cli(tiny_model_path, renderer, tmp_path):
    builder = make_env_dataset(
        "calculator_agent", renderer, group_size=2, groups_per_batch=2, num_batches=3, max_operand=5
    )
    with pytest.raises(ValueError, match="env 'calculator_agent': option 'problem' must be one of"):
        make_env_dataset("calculator_agent", renderer, problem="div")
    assert builder.max_operand == 5
    from trl_envs.cli.commands import main as trl_envs_cli

    result = tmp_path / "eval.json"
    assert (
        trl_envs_cli(
            [
                "eval",
                "--model",
                tiny_model_path,
                "--env",
                "calculator_agent",
                "--num_problems",
                "2",
                "--samples_per_problem",
                "2",
                "--max_tokens",
                "8",
                "--output",
                str(result),
                "--no_progress",
            ]
        )
        == 0
    )
    data = json.loads(result.read_text())
    assert data["num_episodes"] == 4 and "env/calculator_agent/correct" in data["metrics"]


def test_calculator_agent_held_out_sums_never_occur_in_training(renderer):
    """With ``held_out_fraction`` the test questions are sums the training split never asks (the learning row's
    held-out measure), and a split of ``mul_add`` is refused with the reason."""
    from trl_envs.rollout.event_loop import run_sync

    builder = make_env_dataset(
        "calculator_agent", renderer, problem="add", max_operand=9, held_out_fraction=0.2, num_batches=40, seed=1
    )
    train, test = run_sync(builder)
    questions = [{t["question"] for t in data.tasks} for data in (train, test)]
    assert questions[0] and questions[1] and not questions[0] & questions[1]
    assert len(questions[0]) > 60 and len(questions[1]) <= 20  # of the 100 sums, 80 train and 20 are held out
    with pytest.raises(ValueError, match="'held_out_fraction' needs problem 'add'"):
        make_env_dataset("calculator_agent", renderer, held_out_fraction=0.2)
