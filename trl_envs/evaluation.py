"""Evaluate a model on an env dataset: mean and std of the total reward per episode, plus every env metric."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .metrics import rollout_metrics, summarize
from .rollouts import ErrorStrategy, FailFast, RolloutBudget, run_rollout_batch
from .sampler import Sampler
from .types import RLDataset, TrajectoryGroup


@dataclass
class EvalResult:
    """What :func:`evaluate` measured.

    Attributes:
        mean_reward, std_reward: over all episodes (population std, as Stable-Baselines3's ``evaluate_policy``).
        num_episodes: episodes played (skipped groups excluded).
        metrics: the mean of every env metric (``env/<tag>/<name>``).
        groups: the trajectory groups, for closer inspection.
    """

    mean_reward: float
    std_reward: float
    num_episodes: int
    metrics: dict[str, float] = field(default_factory=dict)
    groups: list[TrajectoryGroup | None] = field(default_factory=list, repr=False)


def evaluate(sampler: Sampler, dataset: RLDataset, num_batches: int | None = None,
             budget: RolloutBudget | None = None, strategy: ErrorStrategy = FailFast()) -> EvalResult:
    """Play the first ``num_batches`` batches of ``dataset`` (all by default) with ``sampler``.

    Deterministic for a deterministic dataset and a greedy sampler; with a sampling sampler, seed torch first.
    """
    n = len(dataset) if num_batches is None else min(num_batches, len(dataset))
    builders = [b for i in range(n) for b in dataset.get_batch(i)]
    result = run_rollout_batch(builders, sampler, budget, strategy)
    totals = [r for g in result.groups if g is not None for r in g.get_total_rewards()]
    if not totals:
        raise RuntimeError("evaluate: every group was skipped after errors; nothing to report")
    return EvalResult(statistics.fmean(totals), statistics.pstdev(totals), len(totals),
                      summarize(rollout_metrics(result.groups, result.error_counts)), result.groups)
