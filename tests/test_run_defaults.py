"""Defaults by model: the demo recipe for the offline tiny models only; any other model gets TRL's defaults plus
the env's token budgets; what the user sets always wins; the script says where each setting came from."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from trl import GRPOConfig

from trl_envs.run_defaults import env_budgets, is_demo_model

REPO = Path(__file__).resolve().parents[1]
QWEN = "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.fixture(scope="module")
def grpo_script():
    spec = importlib.util.spec_from_file_location("train_grpo_defaults_by_model", REPO / "scripts" / "train_grpo.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script
    spec.loader.exec_module(script)
    return script


def parse(script, capsys, *argv):
    _, (script_args, training_args, model_args, _), _ = script.parse_args(list(argv))
    table = capsys.readouterr().out
    return training_args, table


def source(table: str, name: str) -> str:
    line = next(line for line in table.splitlines() if line.split()[:1] == [name])
    return re.search(r"\(([^()]*)\)$", line).group(1)


def test_the_demo_model_gets_the_demo_recipe(grpo_script, capsys, tiny_model_path):
    for argv in ([], ["--model_name_or_path", tiny_model_path]):
        args, table = parse(grpo_script, capsys, *argv)
        assert args.learning_rate == 1e-3 and args.per_device_train_batch_size == 128 and args.max_steps == 150
        assert source(table, "learning_rate") == "demo recipe"


def test_a_real_model_gets_trl_defaults_plus_the_envs_budgets(grpo_script, capsys):
    trl = GRPOConfig(output_dir="x", use_cpu=True, bf16=False)
    args, table = parse(grpo_script, capsys, "--model_name_or_path", QWEN, "--env", "guess_number")
    assert (
        args.learning_rate == trl.learning_rate and args.per_device_train_batch_size == trl.per_device_train_batch_size
    )
    assert args.max_steps == trl.max_steps and args.gradient_checkpointing == trl.gradient_checkpointing
    assert args.max_completion_length == 32 and args.max_turns == 6
    assert source(table, "learning_rate") == "TRL default"
    assert source(table, "max_turns") == "env guess_number" and "demo recipe" not in table
    args, _ = parse(
        grpo_script, capsys, "--model_name_or_path", QWEN, "--env", "guess_number", "--env_kwargs", '{"max_guesses": 9}'
    )
    assert args.max_turns == 9  # from the env's options


def test_what_the_user_sets_wins_and_is_named(grpo_script, capsys, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("max_turns: 3\nlearning_rate: 2.0e-6\n")
    args, table = parse(
        grpo_script,
        capsys,
        "--config",
        str(config),
        "--model_name_or_path",
        QWEN,
        "--env",
        "guess_number",
        "--learning_rate",
        "5e-6",
        "--max_completion_length",
        "64",
    )
    assert (args.learning_rate, args.max_turns, args.max_completion_length) == (5e-6, 3, 64)
    assert source(table, "learning_rate") == "command line"
    assert source(table, "max_turns") == f"config {config}"
    assert source(table, "max_completion_length") == "command line"


def test_which_models_are_the_demo_model(tmp_path):
    assert is_demo_model(None)
    assert not is_demo_model(QWEN) and not is_demo_model(str(tmp_path))
    (tmp_path / "tiny-chat-v5").mkdir()
    assert is_demo_model(str(tmp_path / "tiny-chat-v5"))


def test_env_budgets():
    assert env_budgets("tool_use", {"max_tool_calls": 2}) == {"max_completion_length": 128, "max_turns": 3}
    assert env_budgets("guess_number", {}, per_turn_key="max_tokens_per_turn") == {
        "max_tokens_per_turn": 32,
        "max_turns": 6,
    }
    assert env_budgets("my_pkg.envs:factory", {}) == {}


@pytest.fixture(scope="module")
def dpo_script():
    spec = importlib.util.spec_from_file_location("train_dpo_defaults_by_model", REPO / "scripts" / "train_dpo.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script
    spec.loader.exec_module(script)
    return script


def test_offline_dpo_shows_no_env_settings_and_env_dpo_does(dpo_script, capsys):
    env_only = ("env_name", "num_rounds", "group_size", "groups_per_round", "max_tokens_per_turn", "max_turns")
    _, table = parse(dpo_script, capsys)  # offline: the built-in preference dataset, no env
    shown = {line.split()[0] for line in table.splitlines()[1:]}
    assert not shown & set(env_only), table
    assert {"learning_rate", "output_dir"} <= shown
    _, table = parse(dpo_script, capsys, "--env", "arithmetic")
    assert source(table, "env_name") == "command line" and "num_rounds" in table
    assert source(table, "group_size") == "trl_envs default" and source(table, "groups_per_round") == "trl_envs default"


def test_the_table_shows_the_env_dataset_and_reward_functions_a_run_has(grpo_script, capsys, tmp_path):
    _, table = parse(grpo_script, capsys)
    shown = {line.split()[0] for line in table.splitlines()[1:]}
    assert "env_name" in shown and not shown & {"env_dataset", "reward_funcs", "reward_weights"}, table
    rows = tmp_path / "rows.jsonl"
    _, table = parse(
        grpo_script, capsys, "--env_dataset", str(rows), "--reward_funcs", "m:f", "--reward_weights", "1", "2"
    )
    shown = {line.split()[0] for line in table.splitlines()[1:]}
    assert "env_name" not in shown, table  # the rows name their envs: no `env_name None`
    assert source(table, "env_dataset") == source(table, "reward_funcs") == "command line"
    assert "[1.0, 2.0]" in next(line for line in table.splitlines() if line.split()[:1] == ["reward_weights"])
