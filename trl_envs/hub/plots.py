"""Training curves from a run's logged metrics: reward and policy entropy against steps, as a PNG.

Rising reward with falling (not collapsing) entropy is the healthy sign of RL fine-tuning: the policy is getting
better while becoming more certain. Entropy falling to near zero early means the policy collapsed onto a few
answers and stops exploring; reward flat while entropy falls means it is becoming certain without getting better.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence

PLOT_FILE = "training_curves.png"

REWARD_KEYS = ("env/all/reward/total", "reward", "rewards/env/mean", "rewards/margins")
"""Where the reward is logged, in order of preference: trl_envs' env reward, TRL's GRPO reward, the reward of the
``env`` reward function, and DPO's reward margin (offline DPO has no env reward)."""

EVAL_REWARD_KEYS = ("eval_env/all/reward/total", "eval_reward")
ENTROPY_KEYS = ("entropy",)


def metric_series(log_history: Sequence[dict], keys: Sequence[str]) -> tuple[str, list[int], list[float]] | None:
    """``(key, steps, values)`` of the first of ``keys`` logged with a number in ``log_history`` (the Trainer's
    ``state.log_history``: dicts with a ``step``), or ``None`` when none is."""
    for key in keys:
        points = [
            (entry["step"], float(entry[key]))
            for entry in log_history
            if isinstance(entry.get(key), (int, float)) and "step" in entry
        ]
        if points:
            return key, [s for s, _ in points], [v for _, v in points]
    return None


def running_mean(values: Sequence[float], window: int) -> list[float]:
    """The mean of the last ``window`` values at each position (fewer at the start).

    >>> running_mean([1.0, 2.0, 3.0, 4.0], 2)
    [1.0, 1.5, 2.5, 3.5]
    """
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_training_curves(
    log_history: Sequence[dict] | str | os.PathLike[str], path: str | os.PathLike[str], title: str | None = None
) -> str | None:
    """Write a PNG of the reward (with the evaluation reward, if logged) and the policy entropy against steps,
    each with its running mean when there are 10 points or more.

    Args:
        log_history: ``trainer.state.log_history``, or the path of a JSON file holding it (the training scripts
            write ``log_history.json``).
        path: the PNG to write (its directory must exist).
        title: figure title.

    Returns:
        ``str(path)``, or ``None`` (with a warning) when neither a reward nor an entropy was logged.
    """
    if isinstance(log_history, (str, os.PathLike)):
        with open(log_history, encoding="utf-8") as f:
            log_history = json.load(f)
    panels = []
    reward = metric_series(log_history, REWARD_KEYS)
    if reward is not None:
        panels.append(("reward", [reward, metric_series(log_history, EVAL_REWARD_KEYS)]))
    entropy = metric_series(log_history, ENTROPY_KEYS)
    if entropy is not None:
        panels.append(("policy entropy", [entropy]))
    if not panels:
        warnings.warn(
            f"plot_training_curves: no reward ({', '.join(REWARD_KEYS)}) or entropy was logged; {path} not written",
            stacklevel=2,
        )
        return None

    from matplotlib.figure import Figure  # a Figure without pyplot: no display, no global backend state (Agg)

    figure = Figure(figsize=(7, 2.6 * len(panels)), layout="constrained")
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (label, series) in zip(axes, panels):
        for item, style in zip(series, ("-o", "s--")):
            if item is None:
                continue
            key, steps, values = item
            smooth = len(values) >= 10  # noisy per-step values: the trend is what a reader looks for
            (line,) = ax.plot(steps, values, style, markersize=3, alpha=0.45 if smooth else 1.0, label=key)
            if smooth:
                window = max(len(values) // 10, 3)
                ax.plot(
                    steps,
                    running_mean(values, window),
                    "-",
                    color=line.get_color(),
                    linewidth=2,
                    label=f"{key} (mean of last {window})",
                )
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    axes[-1].set_xlabel("step")
    if title:
        figure.suptitle(title)
    figure.savefig(path, dpi=100)
    return str(path)
