"""Per-turn credit assignment: one advantage per turn from the step rewards, baselined across the group.

With trajectory-level credit (GRPO's default) every action of an episode gets the same advantage, computed from
the episode's total reward. Per-turn credit gives turn ``t`` of trajectory ``i`` the *reward-to-go* from that turn,

    R[i, t] = sum over k >= t of gamma^(k - t) * r[i, k]      (the group reward counts as part of the last step's)

minus a baseline shared by the group at the same turn index: the mean return-to-go of the trajectories still
running at that turn,

    b[t] = mean over the trajectories j with more than t turns of R[j, t]

scaled like GRPO (by the std of the group's returns from turn 0, ``R[j, 0]``, plus 1e-4) or not at all:

    A[i, t] = (R[i, t] - b[t]) / (std_j R[j, 0] + 1e-4)

A turn is compared only with the other episodes that reached the same turn: "given the game is still on at turn
t, did this move lead to more reward than the others' moves did?". Episodes that already ended are left out because
their return from here on is 0 for a reason unrelated to the move being judged (they won, or lost, earlier);
comparing with them would reward the late turns of a slow win for merely still being in play. A turn that only one
episode reached has no comparison and gets 0. With ``gamma = 1`` and a single turn this is exactly GRPO's
advantage. See docs/credit_assignment.md for the length-bias discussion.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch

from ..core.types import TrajectoryGroup
from .row_layout import RowPlan
from .rows import Scaling, advantage_scale


def rewards_to_go(step_rewards: Sequence[float], group_reward: float = 0.0, gamma: float = 1.0) -> list[float]:
    """The discounted return from each turn to the end of the episode; ``group_reward`` is paid on the last turn.

    >>> rewards_to_go([0.0, -0.1, 1.0], group_reward=0.5, gamma=1.0)
    [1.4, 1.4, 1.5]
    """
    rewards = [float(r) for r in step_rewards]
    if not rewards:
        return []
    rewards[-1] += float(group_reward)
    out = [0.0] * len(rewards)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return [round(x, 12) for x in out]


def group_returns(group: TrajectoryGroup, gamma: float = 1.0) -> list[list[float]]:
    """``R[i][t]`` for every trajectory ``i`` of the group and each of its turns ``t``."""
    return [
        rewards_to_go([tr.reward for tr in traj.transitions], g, gamma)
        for traj, g in zip(group.trajectories, group.group_rewards)
    ]


def turn_advantages(
    returns: Sequence[Sequence[float]], scale: Scaling = "group", batch_std: float | None = None
) -> list[list[float]]:
    """Per-turn advantages of one group from its returns ``R[i][t]`` (see the module docstring).

    ``scale``: ``"group"`` divides by the group's std of ``R[i][0]`` + 1e-4 (TRL's formula), ``"batch"`` by
    ``batch_std`` + 1e-4 (the std of ``R[i][0]`` over the whole generation batch, which the caller computes, across
    ranks if need be), ``"none"`` only centres. A group of one trajectory gets zeros.
    """
    n = len(returns)
    if n < 2:
        return [[0.0] * len(r) for r in returns]
    horizon = max((len(r) for r in returns), default=0)
    baseline = [statistics.fmean(r[t] for r in returns if t < len(r)) for t in range(horizon)]
    denom = advantage_scale(torch.tensor([r[0] if r else 0.0 for r in returns], dtype=torch.float64), scale, batch_std)
    return [[(r[t] - baseline[t]) / denom for t in range(len(r))] for r in returns]


def row_token_advantages(
    plan: RowPlan,
    groups: Sequence[TrajectoryGroup | None],
    width: int,
    gamma: float = 1.0,
    scale: Scaling = "group",
    batch_std: float | None = None,
) -> torch.Tensor:
    """Per-token advantages ``(len(plan.rows), width)`` for the rows of ``plan``: the tokens of turn ``t``'s action
    get ``A[i, t]``; env tokens, padding and filler rows get 0. This is what TRL's loss accepts as a ``(B, T)``
    advantage tensor."""
    per_group = [turn_advantages(group_returns(g, gamma), scale, batch_std) if g is not None else None for g in groups]
    out = torch.zeros(len(plan.rows), width, dtype=torch.float32)
    for r, planned in enumerate(plan.rows):
        if planned.row is None or planned.group is None or per_group[planned.group] is None:
            continue
        adv = per_group[planned.group][planned.trajectory]
        for k, (start, end) in enumerate(planned.row.action_spans):
            out[r, start : min(end, width)] = adv[planned.row.first_turn + k]
    return out


def first_turn_returns(groups: Sequence[TrajectoryGroup | None], gamma: float = 1.0) -> list[float]:
    """``R[i, 0]`` of every trajectory of every (non-skipped) group: what ``scale="batch"`` takes the std of."""
    return [r[0] for g in groups if g is not None for r in group_returns(g, gamma) if r]
