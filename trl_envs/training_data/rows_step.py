"""One GRPO rollout step, usable without a trainer: roll out the env groups of a batch and lay their trajectories
out as the rows TRL trains on.

    step = rollout_rows(builders, sampler, group_size=4)
    step.plan.rows       # the training rows, ``group_size`` per block (see ``row_layout``)
    step.rollout.groups  # the trajectory groups (``None`` for a group skipped after errors)
    step.metrics()       # env and row metrics, one list of samples per name

``EnvGRPOTrainer`` makes the same step from the rollout it made itself (:meth:`RowsStep.from_rollout`): the same
groups in the same order give the same rows in the same order. The number of trajectories of every group is checked
against ``group_size`` once, where the rows are laid out (:func:`~trl_envs.training_data.row_layout.plan_rows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.types import EnvGroupBuilder
from ..rollout.engine import ErrorStrategy, FailFast, RolloutBatchResult, RolloutBudget, run_rollout_batch
from ..rollout.metrics import rollout_metrics
from ..samplers.base import Sampler
from .row_layout import TRAINING_ROWS, RowPlan, plan_rows


@dataclass
class RowsStep:
    """A rolled-out batch of env groups and its training rows.

    Attributes:
        rollout: the rollout (groups in the builders' order, errors, sampler statistics).
        plan: the training rows, ``plan.group_size`` per block; a caller may pad it (:meth:`RowPlan.pad_to`) before
            handing it on.
        names: one name per group, used in errors (``"<Builder> (group <i>)"`` unless given).
    """

    rollout: RolloutBatchResult
    plan: RowPlan
    names: list[str]

    @classmethod
    def from_rollout(
        cls,
        rollout: RolloutBatchResult,
        *,
        group_size: int,
        training_rows: str = "auto",
        names: Sequence[str] | None = None,
    ) -> RowsStep:
        """Lay out the rows of ``rollout`` (see :func:`~trl_envs.training_data.row_layout.plan_rows` for
        ``training_rows``). Raises ``ValueError`` naming the group when a group's size is not ``group_size``."""
        names = list(names) if names is not None else [f"group {i}" for i in range(len(rollout.groups))]
        if len(names) != len(rollout.groups):
            raise ValueError(f"RowsStep: {len(names)} names for {len(rollout.groups)} groups")
        return cls(rollout, plan_rows(rollout.groups, group_size, training_rows, names), names)

    def metrics(self) -> dict[str, list[float]]:
        """Per-sample values of the env metrics (:func:`~trl_envs.rollout.metrics.rollout_metrics`) plus
        ``rows/per_turn_fraction`` (share of trajectories trained as one row per turn) and ``rows/filler_fraction``
        (share of rows that train nothing, padding included: call it after padding)."""
        plan = self.plan
        metrics = rollout_metrics(self.rollout.groups, self.rollout.error_counts)
        if plan.num_trajectories:
            metrics["rows/per_turn_fraction"] = [plan.num_per_turn_trajectories / plan.num_trajectories]
        metrics["rows/filler_fraction"] = [plan.num_fillers / len(plan.rows)] if plan.rows else []
        return metrics


def rollout_rows(
    builders: Sequence[EnvGroupBuilder],
    sampler: Sampler,
    *,
    group_size: int,
    budget: RolloutBudget | None = None,
    error_strategy: ErrorStrategy | None = None,
    training_rows: str = "auto",
    names: Sequence[str] | None = None,
    max_wait_s: float | None = 30.0,
) -> RowsStep:
    """Roll out ``builders``' groups concurrently with ``sampler`` (one batched call per turn:
    :func:`~trl_envs.rollout.engine.run_rollout_batch`) and lay the trajectories out as training rows.

    Args:
        builders: the env groups of the batch, each making ``group_size`` envs.
        sampler: what generates the actions (e.g. :class:`~trl_envs.samplers.hf.HFSampler`).
        group_size: the GRPO group size (``num_generations``).
        budget, error_strategy, max_wait_s: as in ``run_rollout_batch`` (``error_strategy`` default: ``FailFast``).
        training_rows: ``"auto"``, ``"trajectory"`` or ``"turn"`` (see ``plan_rows``).
        names: one name per builder for errors (default ``"<Builder> (group <i>)"``).

    Raises:
        ValueError: a group whose size is not ``group_size`` (named), or an unknown ``training_rows``.
    """
    if training_rows not in TRAINING_ROWS:  # before rolling out, not after
        raise ValueError(f"rollout_rows: training_rows must be one of {TRAINING_ROWS}, got {training_rows!r}")
    if names is None:
        names = [f"{type(b).__name__} (group {i})" for i, b in enumerate(builders)]
    rollout = run_rollout_batch(builders, sampler, budget, error_strategy or FailFast(), max_wait_s)
    return RowsStep.from_rollout(rollout, group_size=group_size, training_rows=training_rows, names=names)


__all__ = ["RowsStep", "rollout_rows"]
