"""Env metrics of a rollout batch, as per-sample values ready to be averaged (also across processes).

Every metric is returned as the list of its samples, so that a mean over ranks can weight each episode equally
(sum of values / number of values, gathered). Names: ``env/<tag>/<name>`` where ``<tag>`` is ``all`` or one of
the builders' ``logging_tags()``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..core.types import TrajectoryGroup


def rollout_metrics(groups: Sequence[TrajectoryGroup | None], error_counts: dict[str, int],
                    prefix: str = "env") -> dict[str, list[float]]:
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
        samples: list[tuple[str, float]] = [("mixed_rewards", float(len(set(totals)) > 1))]  # computed once, then
        for traj, total, g_reward, g_metrics in zip(group.trajectories, totals, group.group_rewards,  # filed under
                                                    group.group_metrics):  # "all" and each tag
            samples += [("reward/total", total), ("reward/step", traj.step_reward), ("reward/group", g_reward),
                        ("turns", float(len(traj.transitions))), ("action_tokens", float(traj.num_action_tokens)),
                        ("done", float(traj.stop_reason == "done"))]
            samples += _step_metric_means(traj.transitions).items()
            samples += [(f"group/{name}", float(value)) for name, value in g_metrics.items()]
        for key in ["all"] + [t for t in group.tags if t != "all"]:
            base = f"{prefix}/{key}/"
            for name, value in samples:
                out[base + name].append(value)
    n_groups = max(len(groups), 1)
    skipped = sum(g is None for g in groups)
    out[f"{prefix}/all/skipped_groups"] = [1.0] * skipped + [0.0] * (len(groups) - skipped)
    for name, count in error_counts.items():
        # `count` errors spread over the batch's groups: the cross-rank mean is then errors per group.
        out[f"{prefix}/all/errors/{name}"] = [float(count)] + [0.0] * (n_groups - 1)
    return dict(out)


def _step_metric_means(transitions) -> dict[str, float]:
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
