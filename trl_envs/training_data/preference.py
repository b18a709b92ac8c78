"""Preference pairs from env rollouts: in each group, the best trajectory is *chosen* and the worst *rejected*.

Pure functions over :class:`~trl_envs.core.types.TrajectoryGroup`, used by :class:`~trl_envs.trainers.dpo.EnvDPOTrainer`
and usable on their own (build pairs once, save them with ``datasets``, train offline DPO on them later).

Rules, per group:

* best and worst by :meth:`TrajectoryGroup.get_total_rewards` (step rewards + group reward); among equal rewards the
  earliest trajectory is taken, so pairs are deterministic;
* no pair when the best and the worst total rewards differ by ``min_reward_gap`` or less (all ties, by default), when
  the group has fewer than two trajectories, when the trajectories do not all start from the same prompt tokens
  (players of a multi-agent game see different prompts: their rewards are not preferences over one prompt), when
  the chosen and rejected completions are the same tokens (DPO would get no gradient from them), and for groups
  skipped after rollout errors (``None``);
* a pair row is token-exact (see :func:`~trl_envs.training_data.rows.trajectory_to_data`): ``prompt_ids`` is the first
  observation, ``chosen_ids`` / ``rejected_ids`` are the actions plus the env tokens between them, and
  ``chosen_mask`` / ``rejected_mask`` are 1 exactly on sampled tokens, so multi-turn env tokens stay out of the DPO
  loss;
* a trajectory whose observations stop extending the previous context (``Env.observations_extend = False``: a
  fresh board each turn, a re-rendered conversation) takes part with its longest token-exact prefix: its turns up to
  the first observation that does not extend (at least the first turn), since one DPO completion is one sequence.

Every skipped group is counted by reason in :class:`PairStats`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.types import Trajectory, TrajectoryGroup
from .rows import trajectory_to_data

PAIR_COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids", "chosen_mask", "rejected_mask")
"""The columns :class:`~trl_envs.trainers.dpo.EnvDPOTrainer` trains on (other columns are for inspection)."""


@dataclass
class PairStats:
    """How the groups of a batch turned into pairs.

    Attributes:
        num_groups: groups looked at (``None`` entries included).
        num_pairs: pairs made (at most one per group).
        ties: groups whose best and worst total rewards differ by no more than ``min_reward_gap``.
        too_small: groups with fewer than two trajectories.
        prompt_mismatch: groups whose trajectories do not all share the same prompt tokens.
        identical: groups whose best and worst trajectories sampled exactly the same tokens.
        skipped: groups that were skipped after rollout errors (``None``).
    """

    num_groups: int = 0
    num_pairs: int = 0
    ties: int = 0
    too_small: int = 0
    prompt_mismatch: int = 0
    identical: int = 0
    skipped: int = 0

    @property
    def num_unpaired(self) -> int:
        return self.num_groups - self.num_pairs

    def as_metrics(self, prefix: str = "pairs") -> dict[str, float]:
        return {
            f"{prefix}/{name}": float(value)
            for name, value in (
                ("groups", self.num_groups),
                ("pairs", self.num_pairs),
                ("ties", self.ties),
                ("too_small", self.too_small),
                ("prompt_mismatch", self.prompt_mismatch),
                ("identical", self.identical),
                ("skipped", self.skipped),
            )
        }

    def __add__(self, other: PairStats) -> PairStats:
        return PairStats(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))


@dataclass
class PreferencePair:
    """One training pair (see the module docstring). ``chosen_reward`` > ``rejected_reward``; ``tags`` are the
    group's logging tags."""

    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    chosen_mask: list[int]
    rejected_mask: list[int]
    chosen_reward: float
    rejected_reward: float
    tags: list[str] = field(default_factory=list)

    def as_row(self) -> dict[str, Any]:
        """The pair as a dataset row (``datasets.Dataset.from_list`` of these rows is a pre-tokenized DPO dataset)."""
        return {
            "prompt_ids": self.prompt_ids,
            "chosen_ids": self.chosen_ids,
            "rejected_ids": self.rejected_ids,
            "chosen_mask": self.chosen_mask,
            "rejected_mask": self.rejected_mask,
            "chosen_reward": self.chosen_reward,
            "rejected_reward": self.rejected_reward,
        }


def group_to_pair(
    group: TrajectoryGroup, *, min_reward_gap: float = 0.0, env_name: str = "group"
) -> tuple[PreferencePair | None, str | None]:
    """The pair of one group, or ``(None, reason)`` with reason one of ``"too_small"``, ``"ties"``,
    ``"prompt_mismatch"``, ``"identical"``.

    Raises :class:`~trl_envs.training_data.rows.NonExtendingObservationError` (naming ``env_name``) when a trajectory
    cannot be one token-exact sequence.
    """
    if len(group.trajectories) < 2:
        return None, "too_small"
    rewards = group.get_total_rewards()
    best = max(range(len(rewards)), key=lambda i: (rewards[i], -i))
    worst = min(range(len(rewards)), key=lambda i: (rewards[i], i))
    if rewards[best] - rewards[worst] <= min_reward_gap:
        return None, "ties"
    prompts = {tuple(t.transitions[0].ob) for t in group.trajectories if t.transitions}
    if len(prompts) != 1 or any(not t.transitions for t in group.trajectories):
        return None, "prompt_mismatch"
    chosen = trajectory_to_data(
        token_exact_prefix(group.trajectories[best]), env_name=f"{env_name} (trajectory {best})"
    )
    rejected = trajectory_to_data(
        token_exact_prefix(group.trajectories[worst]), env_name=f"{env_name} (trajectory {worst})"
    )
    if chosen.completion_ids == rejected.completion_ids:
        return None, "identical"
    pair = PreferencePair(
        chosen.prompt_ids,
        chosen.completion_ids,
        rejected.completion_ids,
        chosen.mask,
        rejected.mask,
        float(rewards[best]),
        float(rewards[worst]),
        list(group.tags),
    )
    return pair, None


def token_exact_prefix(trajectory: Trajectory) -> Trajectory:
    """``trajectory`` itself when its env promised extending observations; otherwise its turns up to (not
    including) the first whose observation is not the previous observation + action + new tokens."""
    if trajectory.observations_extend or not trajectory.transitions:
        return trajectory
    first = trajectory.transitions[0]
    keep, context = [first], list(first.ob) + list(first.ac.tokens)
    for tr in trajectory.transitions[1:]:
        if list(tr.ob[: len(context)]) != context:
            break
        keep.append(tr)
        context = list(tr.ob) + list(tr.ac.tokens)
    return replace(trajectory, transitions=keep, observations_extend=True)


def make_preference_pairs(
    groups: Sequence[TrajectoryGroup | None], *, min_reward_gap: float = 0.0, env_names: Sequence[str] | None = None
) -> tuple[list[PreferencePair], PairStats]:
    """At most one :class:`PreferencePair` per group (see the module docstring), and the counts of what was skipped.

    Args:
        groups: trajectory groups, e.g. ``run_rollout_batch(...).groups`` (``None`` = skipped after errors).
        min_reward_gap: a pair needs ``best - worst > min_reward_gap`` (``0.0``: any strict difference).
        env_names: a name per group for error messages (default: the group's first tag).
    """
    if min_reward_gap < 0:
        raise ValueError(f"make_preference_pairs: min_reward_gap must be >= 0, got {min_reward_gap}")
    stats = PairStats(num_groups=len(groups))
    pairs: list[PreferencePair] = []
    for i, group in enumerate(groups):
        if group is None:
            stats.skipped += 1
            continue
        name = env_names[i] if env_names is not None else (group.tags[0] if group.tags else f"group {i}")
        pair, reason = group_to_pair(group, min_reward_gap=min_reward_gap, env_name=name)
        if pair is None:
            setattr(stats, reason, getattr(stats, reason) + 1)
        else:
            pairs.append(pair)
    stats.num_pairs = len(pairs)
    return pairs, stats
