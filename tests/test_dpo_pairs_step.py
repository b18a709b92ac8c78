"""The pairs step of env-driven DPO without a trainer: ``rollout_pairs`` with an ``HFSampler`` on the tiny model."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM

from trl_envs import HFSampler, RolloutBudget, make_env_dataset, make_preference_pairs, rollout_pairs
from trl_envs.rollout.event_loop import run_sync

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sampler(tiny_model_path, tokenizer):
    return HFSampler(AutoModelForCausalLM.from_pretrained(tiny_model_path).eval(), tokenizer, temperature=1.0)


def arithmetic_groups(renderer, n: int = 6):
    train, _ = run_sync(make_env_dataset("arithmetic", renderer, group_size=4, batch_size=n, num_batches=1))
    return train.get_batch(0)


def test_rollout_pairs_pairs_the_best_and_the_worst_of_each_group(sampler, renderer):
    torch.manual_seed(0)
    builders = arithmetic_groups(renderer)
    pairs, stats, rollout = rollout_pairs(builders, sampler, budget=RolloutBudget(max_turns=2, max_tokens_per_turn=8))
    assert len(rollout.groups) == len(builders) == stats.num_groups
    assert all(len(g.trajectories) == 4 for g in rollout.groups)
    assert stats.num_pairs == len(pairs) > 0  # the tiny model answers some sums right and some wrong
    assert stats.num_pairs + stats.ties + stats.identical == len(builders)
    assert [p.as_row() for p in pairs] == [p.as_row() for p in make_preference_pairs(rollout.groups)[0]]
    for pair in pairs:
        assert pair.chosen_reward > pair.rejected_reward
        assert len(pair.chosen_mask) == len(pair.chosen_ids) and len(pair.rejected_mask) == len(pair.rejected_ids)
    rows = Dataset.from_list([p.as_row() for p in pairs])  # a pre-tokenized DPO dataset as it is
    assert {"prompt_ids", "chosen_ids", "rejected_ids", "chosen_mask", "rejected_mask"} <= set(rows.column_names)


def test_min_reward_gap_turns_close_groups_into_ties(sampler, renderer):
    step = rollout_pairs(
        arithmetic_groups(renderer, 2),
        sampler,
        budget=RolloutBudget(max_turns=1, max_tokens_per_turn=4),
        min_reward_gap=10.0,
    )
    assert step.pairs == [] and step.stats.ties == 2  # arithmetic rewards lie in [-0.1, 1]
    with pytest.raises(ValueError, match="rollout_pairs: min_reward_gap must be >= 0, got -1"):
        rollout_pairs([], sampler, min_reward_gap=-1)
