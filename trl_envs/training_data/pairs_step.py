"""One step of env-driven DPO, usable without a trainer: roll out env groups with a sampler, pair their trajectories.

    step = rollout_pairs(builders, HFSampler(model, tokenizer), budget=RolloutBudget(max_turns=4))
    Dataset.from_list([p.as_row() for p in step.pairs])   # a pre-tokenized DPO dataset

The groups are rolled out together (:func:`~trl_envs.rollout.engine.run_rollout_batch`: one batched sampler call per
turn) and each group gives at most one pair, best against worst
(:func:`~trl_envs.training_data.preference.make_preference_pairs`, whose rules apply).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from ..core.types import EnvGroupBuilder
from ..rollout.engine import ErrorStrategy, FailFast, RolloutBatchResult, RolloutBudget, run_rollout_batch
from ..samplers.base import Sampler
from .preference import PairStats, PreferencePair, make_preference_pairs


class PairsStep(NamedTuple):
    """What :func:`rollout_pairs` returns (also unpacks as ``pairs, stats, rollout``).

    Attributes:
        pairs: at most one :class:`PreferencePair` per group, in group order.
        stats: how many groups gave a pair, and why the others did not.
        rollout: the rollout itself (groups in ``builders`` order, ``None`` for a skipped group; error counts).
    """

    pairs: list[PreferencePair]
    stats: PairStats
    rollout: RolloutBatchResult

    @classmethod
    def from_rollout(cls, rollout: RolloutBatchResult, *, min_reward_gap: float = 0.0) -> PairsStep:
        """The pairs of a rollout made elsewhere (a trainer's): each group's best against its worst trajectory
        (:func:`~trl_envs.training_data.preference.make_preference_pairs`, whose rules apply)."""
        if min_reward_gap < 0:
            raise ValueError(f"PairsStep: min_reward_gap must be >= 0, got {min_reward_gap}")
        pairs, stats = make_preference_pairs(rollout.groups, min_reward_gap=min_reward_gap)
        return cls(pairs, stats, rollout)


def rollout_pairs(
    builders: Sequence[EnvGroupBuilder],
    sampler: Sampler,
    *,
    budget: RolloutBudget | None = None,
    error_strategy: ErrorStrategy | None = None,
    min_reward_gap: float = 0.0,
    max_wait_s: float | None = 30.0,
) -> PairsStep:
    """Roll out the groups of ``builders`` with ``sampler`` and pair each group's best and worst trajectory.

    Args:
        builders: the env groups of the step.
        sampler: the policy to sample actions from (e.g. :class:`~trl_envs.samplers.hf.HFSampler`).
        budget: turns and tokens per episode (default :class:`RolloutBudget`).
        error_strategy: what a failing rollout does (default :class:`FailFast`: the error propagates).
        min_reward_gap: a group gives a pair only if its best and worst total rewards differ by more than this.
        max_wait_s: the longest wait for every live episode to ask for a turn before sampling (see
            :func:`~trl_envs.rollout.engine.run_rollout_batch`).
    """
    if min_reward_gap < 0:  # before rolling out, not after
        raise ValueError(f"rollout_pairs: min_reward_gap must be >= 0, got {min_reward_gap}")
    result = run_rollout_batch(builders, sampler, budget, error_strategy or FailFast(), max_wait_s)
    return PairsStep.from_rollout(result, min_reward_gap=min_reward_gap)


__all__ = ["PairsStep", "rollout_pairs"]
