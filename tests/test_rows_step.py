"""The GRPO rollout step without a trainer (``rollout_rows``), the typed group keys, and the rows the trainer hands
to TRL."""

from __future__ import annotations

import pytest
import torch

from trl_envs import EnvGRPOTrainer, HFSampler, RolloutBudget, RowsStep, make_env_dataset, rollout_rows
from trl_envs.rollout.event_loop import run_sync
from trl_envs.trainers.group_index import GroupIndex, GroupKey, keys_of_rows

pytestmark = pytest.mark.timeout(300)


def batch_of_groups(renderer, group_size=4, groups=2):
    train, _ = run_sync(make_env_dataset("arithmetic", renderer, group_size=group_size, batch_size=groups))
    return train.get_batch(0)


@pytest.fixture(scope="module")
def sampler(tiny_model_path, tokenizer):
    from transformers import AutoModelForCausalLM

    return HFSampler(AutoModelForCausalLM.from_pretrained(tiny_model_path), tokenizer, temperature=1.0)


# -- the step, without a trainer --------------------------------------------------------------------------------


def test_rollout_rows_rolls_out_a_batch_and_plans_its_rows(sampler, renderer):
    torch.manual_seed(0)
    step = rollout_rows(batch_of_groups(renderer), sampler, group_size=4, budget=RolloutBudget(max_tokens_per_turn=8))
    groups = step.rollout.groups
    assert len(groups) == 2 and all(len(g.trajectories) == 4 for g in groups)
    plan = step.plan
    assert plan.num_blocks == 2 and len(plan.rows) == 8 and plan.num_fillers == 0
    for i, planned in enumerate(plan.rows):  # block g holds group g's trajectories, in order, with their totals
        group, trajectory = divmod(i, 4)
        traj = groups[group].trajectories[trajectory]
        assert (planned.group, planned.trajectory) == (group, trajectory)
        assert planned.reward == groups[group].get_total_rewards()[trajectory]
        assert planned.row.prompt_ids == list(traj.transitions[0].ob)
        assert planned.row.completion_ids == list(traj.transitions[0].ac.tokens)
    metrics = step.metrics()
    assert len(metrics["env/all/reward/total"]) == 8
    assert metrics["rows/filler_fraction"] == [0.0] and metrics["rows/per_turn_fraction"] == [0.0]


def test_group_size_is_checked_where_rows_are_laid_out(sampler, renderer):
    with pytest.raises(
        ValueError,
        match=r"ArithmeticGroupBuilder \(group 1\) made 2 envs but the group size \(num_generations\) is 4",
    ):
        rollout_rows(
            batch_of_groups(renderer, group_size=4)[:1] + batch_of_groups(renderer, group_size=2)[1:],
            sampler,
            group_size=4,
            budget=RolloutBudget(max_tokens_per_turn=4),
        )


def test_unknown_training_rows_fails_before_rolling_out(renderer):
    class NoSampler:
        async def sample(self, *args, **kwargs):
            raise AssertionError("rolled out before checking training_rows")

    with pytest.raises(ValueError, match=r"training_rows must be one of .* got 'rows'"):
        rollout_rows(batch_of_groups(renderer), NoSampler(), group_size=4, training_rows="rows")


def test_trainer_trains_on_the_rows_the_step_plans(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    envs = make_env_dataset("guess_number", renderer, group_size=4, batch_size=2, num_batches=4)
    trainer = EnvGRPOTrainer(tiny_model_path, cpu_grpo_config(), envs, processing_class=tokenizer)
    trainer.model.train()
    keys = trainer.train_dataset["prompt"][:2]
    out = trainer.generation_batch(keys)
    names = [f"{type(trainer.env_group(k)).__name__} (row {k})" for k in keys]
    plan = RowsStep.from_rollout(trainer.last_rollout, group_size=4, names=names).plan
    assert out["completion_ids"].size(0) == len(plan.rows)
    for i, planned in enumerate(plan.rows):
        n = len(planned.row.completion_ids)
        assert out["completion_ids"][i, :n].tolist() == planned.row.completion_ids
        assert out["tool_mask"][i, :n].tolist() == planned.row.mask
    assert trainer.logged_completions()["rewards"]["env"][-len(plan.rows) :] == pytest.approx(
        [p.reward for p in plan.rows]
    )
    assert trainer.logged_completions()["prompt"][-len(plan.rows) :] == [keys[p.group] for p in plan.rows]


# -- group keys --------------------------------------------------------------------------------------------------


def test_group_key_text_round_trips_and_bad_text_is_named():
    key = GroupKey("train", 12, 3)
    assert str(key) == "train/12/3" and GroupKey.parse("train/12/3") == key and GroupKey.parse(key) is key
    for bad in ("train/1", "train/a/1", "/1/2", "train/1/-2", 7):
        with pytest.raises(ValueError, match="is not a group key"):
            GroupKey.parse(bad)


def test_index_dataset_rows_are_the_texts_of_its_keys(renderer):
    train, _ = run_sync(make_env_dataset("arithmetic", renderer, group_size=2, batch_size=3, num_batches=4))
    index = GroupIndex("train", train)
    texts = index.as_dataset()["prompt"]
    assert [GroupKey.parse(t) for t in texts] == [index.key(j) for j in range(index.num_groups)]
    with pytest.raises(KeyError, match="no env group 'eval/0/0'"):
        index.builder(GroupKey("eval", 0, 0))
    with pytest.raises(KeyError, match="no env group 'train/4/0'"):
        index.builder(GroupKey("train", 4, 0))


def test_rows_of_a_generation_batch_must_be_whole_groups():
    assert keys_of_rows(["train/0/0"] * 2 + ["train/0/1"] * 2, 2) == [GroupKey("train", 0, 0), GroupKey("train", 0, 1)]
    with pytest.raises(ValueError, match=r"rows 0..1 mix env groups \['train/0/0', 'train/0/1'\]"):
        keys_of_rows(["train/0/0", "train/0/1"], 2)
    with pytest.raises(ValueError, match="got 3 rows, not a multiple of the group size 2"):
        keys_of_rows(["train/0/0"] * 3, 2)
