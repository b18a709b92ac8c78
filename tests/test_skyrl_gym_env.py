"""SkyRL-Gym envs by name (``skyrl_gym/<env id>``) on SkyRL-format rows, scored by the envs' own step rewards:
single-turn and multi-turn, by name from data files, as env-dataset rows, listed, trained; offline."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("skyrl_gym")

from trl_envs import EnvGRPOTrainer, Renderer  # noqa: E402
from trl_envs.registry import list_envs, make_env_dataset, make_env_group_builder  # noqa: E402
from trl_envs.registry.names import UnknownEnvError  # noqa: E402
from trl_envs.rollout.engine import RolloutBudget, run_rollout_batch  # noqa: E402
from trl_envs.rollout.event_loop import run_sync  # noqa: E402
from trl_envs.samplers.text_policy import TextPolicySampler  # noqa: E402


def sum_row(a: int, b: int, env_class: str = "gsm8k", **extra) -> dict:
    """A row in SkyRL's dataset format, as its gsm8k example script writes them."""
    return {
        "data_source": "sums",
        "prompt": [{"role": "user", "content": f"What is {a} + {b}? End with '#### N'."}],
        "env_class": env_class,
        "reward_spec": {"method": "rule", "ground_truth": str(a + b)},
        "extra_info": {"split": "train", **extra},
    }


def write_rows(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def right_when_a_is_even(prompt: str) -> str:
    a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)", prompt)[-1])
    return f"So #### {a + b if a % 2 == 0 else a + b + 1}"


def test_listed_names():
    names = list_envs()
    assert {"skyrl_gym/gsm8k", "skyrl_gym/gsm8k_multi_turn", "skyrl_gym/aime"} <= set(names)
    assert "skyrl_gym/search" not in names  # needs a retrieval server: by name only


def test_gsm8k_by_name_is_scored_by_skyrl_gyms_own_rule(renderer, tmp_path):
    rows = [sum_row(a, 3) for a in range(8)]
    envs = make_env_dataset(
        "skyrl_gym/gsm8k",
        renderer,
        data_files=write_rows(tmp_path / "train.jsonl", rows),
        group_size=2,
        groups_per_batch=4,
        num_test_batches=1,
    )
    train, test = run_sync(envs)
    builders = list(train.get_batch(0)) + list(test.get_batch(0))
    result = run_rollout_batch(builders, TextPolicySampler(renderer, right_when_a_is_even), RolloutBudget(max_turns=3))
    seen = set()
    for builder, group in zip(builders, result.groups):
        a = int(re.findall(r"What is (\d+)", builder.row["prompt"][0]["content"])[0])
        seen.add(a)
        assert [t.step_reward for t in group.trajectories] == [1.0 if a % 2 == 0 else 0.0] * 2
        assert group.tags == ["skyrl_gym/gsm8k"]
    assert seen == set(range(8))  # the last 4 rows are the held-out test split, the first 4 train


def test_multi_turn_rewards_each_turn(renderer):
    replies = iter(["#### 9", "#### 7"])  # wrong (well formatted), then right: the env ends there
    builder = make_env_group_builder(
        {"env": "skyrl_gym/gsm8k_multi_turn", **sum_row(3, 4, "gsm8k_multi_turn", max_turns=3)}, renderer, 1
    )
    result = run_rollout_batch([builder], TextPolicySampler(renderer, lambda p: next(replies)), RolloutBudget(10))
    (trajectory,) = result.groups[0].trajectories
    assert [t.reward for t in trajectory.transitions] == pytest.approx([0.2 / 3, 1.0])
    assert trajectory.transitions[-1].episode_done


def test_bad_input_is_one_line_naming_what(renderer, tmp_path):
    with pytest.raises(ValueError, match="give the SkyRL-format dataset to play: option 'data_files'"):
        make_env_dataset("skyrl_gym/gsm8k", renderer)
    wrong = write_rows(tmp_path / "t.jsonl", [sum_row(1, 2, "aime")] * 4)
    with pytest.raises(ValueError, match=r"data_files row 0 is for env_class 'aime'; train it as 'skyrl_gym/aime'"):
        make_env_dataset("skyrl_gym/gsm8k", renderer, data_files=wrong)
    with pytest.raises(UnknownEnvError, match="did you mean 'skyrl_gym/gsm8k'"):
        make_env_dataset("skyrl_gym/gsm8kk", renderer)
    with pytest.raises(ValueError, match="'prompt' must be a non-empty list of chat messages"):
        make_env_group_builder({"env": "skyrl_gym/gsm8k", "prompt": []}, renderer, 1)


def test_trains_one_step_by_name(tiny_model_path, tokenizer, cpu_grpo_config, tmp_path):
    envs = make_env_dataset(
        "skyrl_gym/gsm8k",
        Renderer(tokenizer),
        data_files=write_rows(tmp_path / "train.jsonl", [sum_row(a, 1) for a in range(12)]),
        group_size=4,
        groups_per_batch=2,
    )
    trainer = EnvGRPOTrainer(tiny_model_path, cpu_grpo_config(max_turns=1), envs, processing_class=tokenizer)
    trainer.train()
    assert [h for h in trainer.state.log_history if "env/skyrl_gym/gsm8k/reward/total" in h]
