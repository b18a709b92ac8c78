"""reasoning-gym tasks as ``reasoning_gym/<task>`` envs: score_answer as the reward, config as env kwargs, held-out
split, rows, a composite with per-task tags, GRPO training, ``trl-envs eval``, and the errors of bad names and
configs. Also: ``import trl_envs`` imports none of the ecosystem packages."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("reasoning_gym")

from trl_envs.registry import EnvRowError, UnknownEnvError, get_env, list_envs, make_env_dataset, make_env_group_builder
from trl_envs.rollout.event_loop import run_sync

pytestmark = pytest.mark.timeout(300)
TASK = "reasoning_gym/basic_arithmetic"
SMALL = {"size": 40, "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def test_import_trl_envs_imports_no_ecosystem_package():
    code = (
        "import sys, trl_envs, trl_envs.registry; "
        "print([m for m in ('reasoning_gym', 'textarena', 'pettingzoo') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def step_reply(renderer, env, text):
    tokens = renderer.tokenizer.encode(text, add_special_tokens=False) + [renderer.end_of_turn_token_id]
    return run_sync(lambda: env.step(tokens))


async def first_env(builder):
    return (await builder.make_envs())[0]


def test_reward_is_the_task_score_answer(renderer):
    group = make_env_group_builder({"env": TASK, "index": 0, "config": SMALL}, renderer, 2)
    env = run_sync(lambda: first_env(group))
    run_sync(env.initial_observation)
    right = step_reply(renderer, env, env.entry["answer"])
    assert right.reward == 1.0 and right.metrics["correct"] == 1.0
    env = run_sync(lambda: first_env(group))
    wrong = step_reply(renderer, env, "not a number")
    assert wrong.reward == 0.0 == env.dataset.score_answer("not a number", env.entry)


def test_answer_tag_reads_the_tagged_answer_and_adds_the_task_prompt(renderer):
    group = make_env_group_builder({"env": TASK, "index": 1, "config": SMALL, "answer_tag": "answer"}, renderer, 1)
    env = run_sync(lambda: first_env(group))
    assert env.convo_prefix[0]["role"] == "system"
    assert step_reply(renderer, env, f"so <answer>{env.entry['answer']}</answer>").reward == 1.0
    env = run_sync(lambda: first_env(group))
    untagged = step_reply(renderer, env, env.entry["answer"])
    assert untagged.reward == pytest.approx(-0.1) and untagged.metrics["format"] == 0.0


def test_config_goes_to_the_task_and_test_split_is_held_out(renderer):
    import reasoning_gym

    builder = make_env_dataset(TASK, renderer, group_size=2, groups_per_batch=4, num_batches=5, **SMALL)
    train, test = run_sync(builder)
    train_envs = [run_sync(lambda b=b: first_env(b)) for i in range(len(train)) for b in train.get_batch(i)]
    assert {e.entry["metadata"]["num_terms"] for e in train_envs} == {2}  # min_terms = max_terms = 2
    test_qs = {run_sync(lambda b=b: first_env(b)).get_question() for b in test.get_batch(0)}
    train_split = reasoning_gym.create_dataset("basic_arithmetic", **{**SMALL, "seed": 0})  # seed 0: training
    assert len(test_qs) == 4 and not test_qs & {e["question"] for e in train_split}


def test_bad_names_and_configs_are_named(renderer):
    with pytest.raises(UnknownEnvError, match="did you mean 'reasoning_gym/basic_arithmetic'"):
        get_env("reasoning_gym/basic_arithmetc")
    with pytest.raises(ValueError, match="option 'size' must be an integer >= 1"):
        make_env_dataset(TASK, renderer, size=0)
    with pytest.raises(ValueError, match="rejected the config .*max_termz.*Its options: .*max_terms"):
        make_env_dataset(TASK, renderer, max_termz=3)
    with pytest.raises(EnvRowError, match="field 'index'"):
        make_env_group_builder({"env": TASK}, renderer, 2)
    assert TASK in list_envs() and len([n for n in list_envs() if n.startswith("reasoning_gym/")]) > 100


def test_a_mixed_row_dataset_trains_two_grpo_steps_with_per_task_metrics(
    cpu_grpo_config, tiny_model_path, tokenizer, renderer
):
    from datasets import Dataset

    from trl_envs import EnvGRPOTrainer
    from trl_envs.registry.env_datasets import EnvRowDataset

    rows = [
        {"env": TASK, "index": i, "config": {"size": 20, "max_terms": 2}}
        if i % 2
        else {"env": "reasoning_gym/chain_sum", "index": i, "config": {"size": 20}}
        for i in range(8)
    ]
    # one struct column: chain_sum rows read back {"size": 20, "max_terms": None}, a None the adapter drops
    envs = EnvRowDataset(Dataset.from_list(rows), renderer, group_size=4, groups_per_batch=2)
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        cpu_grpo_config(max_steps=2, max_completion_length=6, max_turns=1),
        envs,
        processing_class=tokenizer,
    )
    trainer.train()
    logged = {k for h in trainer.state.log_history for k in h}
    assert trainer.state.global_step == 2
    assert {"env/reasoning_gym/basic_arithmetic/reward/total", "env/reasoning_gym/chain_sum/reward/total"} <= logged


def test_composite_tags_each_group_with_its_source_task(renderer):
    builder = make_env_dataset(
        "reasoning_gym/composite",
        renderer,
        group_size=2,
        groups_per_batch=8,
        size=16,
        datasets=[{"name": "basic_arithmetic"}, {"name": "chain_sum", "weight": 2}],
    )
    train, _ = run_sync(builder)
    sources = {b.logging_tags()[1] for b in train.get_batch(0)}
    assert sources == {"reasoning_gym/basic_arithmetic", "reasoning_gym/chain_sum"}


def test_trl_envs_eval_plays_a_task(tmp_path, tiny_model_path):
    from trl_envs.cli.commands import main

    out = tmp_path / "eval.json"
    assert (
        main(
            [
                "eval",
                "--model",
                tiny_model_path,
                "--env",
                TASK,
                "--env_kwargs",
                json.dumps(SMALL),
                "--num_problems",
                "2",
                "--samples_per_problem",
                "2",
                "--max_tokens",
                "6",
                "--device",
                "cpu",
                "--no_progress",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())
