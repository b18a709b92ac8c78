"""Env metrics of a rollout batch, as per-sample values ready to be averaged (also across processes).

Every metric is returned as the list of its samples, so that a mean over ranks can weight each episode equally
(sum of values / number of values, gathered). Names: ``env/<tag>/<name>`` where ``<tag>`` is ``all`` or one of
the builders' ``logging_tags()``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..core.types import TrajectoryGroup


def rollout_metrics(
    groups: Sequence[TrajectoryGroup | None], error_counts: dict[str, int], prefix: str = "env"
) -> dict[str, list[float]]:
    """Per-sample values of every env metric of a batch (see the module docstring).

    Per episode: ``reward/total`` (step rewards + group reward), ``reward/step``, ``reward/group``, ``turns``,
    ``action_tokens``, ``done`` (1 when the env ended the episode, 0 when a budget did), the mean of each step
    metric over the episode's steps, and each group metric. Per group: ``mixed_rewards`` (1 when the group's total
    rewards differ, i.e. it carries a GRPO signal). Per batch: ``errors/<Type>`` (errors per group) and
    ``skipped_groups`` (share of groups skipped after errors).
    """
    out: dict[str, list[float]] = defaultdict(list)
    for group in groups:
        if group is None:
            continue
        totals = group.get_total_rewards()
        # The group's samples by name, computed once, then filed under "all" and each tag.
        values: dict[str, list[float]] = {
            "mixed_rewards": [float(len(set(totals)) > 1)],
            "reward/total": [],
            "reward/step": [],
            "reward/group": [],
            "turns": [],
            "action_tokens": [],
            "done": [],
        }
        for traj, total, g_reward, g_metrics in zip(
            group.trajectories, totals, group.group_rewards, group.group_metrics
        ):
            transitions = traj.transitions
            values["reward/total"].append(total)
            values["reward/step"].append(float(sum(t.reward for t in transitions)))
            values["reward/group"].append(g_reward)
            values["turns"].append(float(len(transitions)))
            values["action_tokens"].append(float(sum(len(t.ac.tokens) for t in transitions)))
            values["done"].append(float(traj.stop_reason == "done"))
            for name, value in _step_metric_means(transitions).items():
                values.setdefault(name, []).append(value)
            for name, value in g_metrics.items():
                values.setdefault(f"group/{name}", []).append(float(value))
        for key in ["all"] + [t for t in group.tags if t != "all"]:
            base = f"{prefix}/{key}/"
            for name, samples in values.items():
                out[base + name] += samples
    n_groups = max(len(groups), 1)
    skipped = sum(g is None for g in groups)
    out[f"{prefix}/all/skipped_groups"] = [1.0] * skipped + [0.0] * (len(groups) - skipped)
    for name, count in error_counts.items():
        # `count` errors spread over the batch's groups: the cross-rank mean is then errors per group.
        out[f"{prefix}/all/errors/{name}"] = [float(count)] + [0.0] * (n_groups - 1)
    return dict(out)


def _step_metric_means(transitions) -> dict[str, float]:
    if len(transitions) == 1:  # a single-turn episode: its step's metrics
        return {name: float(value) for name, value in transitions[0].metrics.items()}
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for tr in transitions:
        for name, value in tr.metrics.items():
            sums[name] += float(value)
            counts[name] += 1
    return {name: sums[name] / counts[name] for name in sums}


def summarize(metrics: dict[str, list[float]]) -> dict[str, float]:
    """The mean of each metric's samples."""
    return {k: sum(v) / len(v) for k, v in metrics.items() if v}
