"""How trajectory groups become the rows of TRL's generation batch.

TRL computes advantages over consecutive blocks of ``G`` rows (``G = num_generations``) and gathers rewards across
ranks, so every rank must hand it the same number of rows, in blocks of ``G`` whose rewards are one group's.
A group whose trajectories are one row each fills one block. A group with per-turn rows (trajectories whose
observations do not extend each other) fills one block per turn of its longest trajectory:

    block 0: turn 0 of trajectories 1..G
    block 1: turn 1 of trajectories 1..G   (a trajectory that has ended contributes a *filler*)
    ...

Every row of a block carries its trajectory's total reward -- fillers too -- so each block has exactly the group's
rewards and TRL gives every turn row its trajectory's advantage, with ``scale_rewards``, multi-objective
aggregation and logging unchanged. Fillers have one end-of-sequence token and a zero mask: they train nothing.
Rows of a skipped group, and whole blocks added so that all ranks have the same number of rows (and a multiple of
``steps_per_generation``), are fillers with no reward (TRL's "unscorable" rows: no baseline, no advantage, not
logged).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.types import Trajectory, TrajectoryGroup
from .rows import NonExtendingObservationError, TrainingRow, trajectory_to_data, trajectory_to_turn_rows

TRAINING_ROWS = ("auto", "trajectory", "turn")


@dataclass
class PlannedRow:
    """One row of the generation batch.

    Attributes:
        row: the training row, or ``None`` for a filler.
        reward: the reward TRL sees for this row (the trajectory's total; ``None`` for unscorable fillers).
        group: index of the group in the rollout batch (``None`` for padding blocks).
        trajectory: index of the trajectory in its group.
    """

    row: TrainingRow | None
    reward: float | None
    group: int | None
    trajectory: int


@dataclass
class RowPlan:
    """The rows of one generation batch, ``group_size`` per block, in block order."""

    rows: list[PlannedRow]
    group_size: int
    num_trajectories: int = 0
    num_per_turn_trajectories: int = 0

    @property
    def num_blocks(self) -> int:
        return len(self.rows) // self.group_size

    @property
    def num_fillers(self) -> int:
        return sum(r.row is None for r in self.rows)

    def pad_to(self, num_blocks: int) -> None:
        """Append unscorable filler blocks until there are ``num_blocks`` blocks."""
        if num_blocks < self.num_blocks:
            raise ValueError(f"RowPlan.pad_to: cannot shrink {self.num_blocks} blocks to {num_blocks}")
        for _ in range(num_blocks - self.num_blocks):
            self.rows += [PlannedRow(None, None, None, i) for i in range(self.group_size)]

    def source_rows(self) -> list[int]:
        """For each row, the index of the input row (``group * G + trajectory``) it stands for; padding blocks
        reuse the first group's inputs."""
        g = self.group_size
        return [(r.group or 0) * g + r.trajectory for r in self.rows]

    def rollout_output(self, pad_token_id: int, eos_token_id: int) -> dict[str, list]:
        """The rows as TRL's ``rollout_func`` returns them (plus ``rewards`` for the reward hook)."""
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "rewards": []}
        for planned in self.rows:
            row = planned.row
            if row is None:
                out["prompt_ids"].append([pad_token_id])
                out["completion_ids"].append([eos_token_id])
                out["logprobs"].append([0.0])
                out["env_mask"].append([0])
            else:
                out["prompt_ids"].append(row.prompt_ids)
                out["completion_ids"].append(row.completion_ids)
                out["logprobs"].append(row.logprobs)
                out["env_mask"].append(row.mask)
            out["rewards"].append(planned.reward)
        return out


def check_group_size(name: str, made: int, group_size: int) -> None:
    """The group-size rule: one env group is one GRPO group, so a group must make exactly ``group_size``
    (``num_generations``) envs. Raises ``ValueError`` naming the group (``name``) and both numbers."""
    if made != group_size:
        raise ValueError(
            f"{name} made {made} envs but the group size (num_generations) is {group_size}; "
            "one env group must be one GRPO group"
        )


def plan_rows(
    groups: Sequence[TrajectoryGroup | None],
    group_size: int,
    training_rows: str = "auto",
    group_names: Sequence[str] | None = None,
) -> RowPlan:
    """Lay out the rows of a rollout batch (see the module docstring); every group is checked with
    :func:`check_group_size`.

    ``groups[k] is None`` marks a skipped group (one block of unscorable fillers). ``training_rows``: ``"auto"``
    (one row per trajectory when its observations extend each other token-exactly, else one row per turn),
    ``"trajectory"`` (always one row; a non-extending observation raises :class:`NonExtendingObservationError`) or
    ``"turn"`` (always one row per turn). ``group_names`` name the groups in errors.

    Raises:
        ValueError: a group whose number of trajectories is not ``group_size``.
    """
    if training_rows not in TRAINING_ROWS:
        raise ValueError(f"plan_rows: training_rows must be one of {TRAINING_ROWS}, got {training_rows!r}")
    plan = RowPlan([], group_size)
    for gi, group in enumerate(groups):
        if group is None:
            plan.rows += [PlannedRow(None, None, gi, i) for i in range(group_size)]
            continue
        name = group_names[gi] if group_names is not None else f"group {gi}"
        check_group_size(name, len(group.trajectories), group_size)
        per_trajectory = []
        for ti, traj in enumerate(group.trajectories):
            rows, per_turn = _rows_of(traj, training_rows, f"{name}, trajectory {ti}")
            per_trajectory.append(rows)
            plan.num_trajectories += 1
            plan.num_per_turn_trajectories += per_turn
        totals = group.get_total_rewards()
        for block in range(max(len(rows) for rows in per_trajectory)):
            for ti, rows in enumerate(per_trajectory):
                plan.rows.append(PlannedRow(rows[block] if block < len(rows) else None, totals[ti], gi, ti))
    return plan


def _rows_of(traj: Trajectory, training_rows: str, name: str) -> tuple[list[TrainingRow], bool]:
    if training_rows == "turn" or (training_rows == "auto" and not traj.observations_extend):
        return trajectory_to_turn_rows(traj, name), True
    try:
        return [trajectory_to_data(traj, name)], False
    except NonExtendingObservationError:
        if training_rows == "trajectory":
            raise
        return trajectory_to_turn_rows(traj, name), True
