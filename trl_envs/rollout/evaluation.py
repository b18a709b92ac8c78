"""Evaluate a model on an env dataset: mean and std of the total reward per episode (as Stable-Baselines3's
``evaluate_policy``), pass@k over the samples of each problem, the same per logging tag, plus every env metric.

A *problem* is one env group (an :class:`~trl_envs.core.types.EnvGroupBuilder`): its envs pose the same problem, so a
group of ``n`` envs is ``n`` samples of one problem, and pass@k is estimated from them with the unbiased estimator of
Chen et al. (2021), ``1 - C(n - c, k) / C(n, k)`` for ``c`` solved samples out of ``n``. An episode counts as
*solved* when its total reward exceeds ``success_threshold`` (default 0: for the built-in envs, a right answer / a won
game), or when ``is_success`` says so.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from ..core.types import EnvGroupBuilder, RLDataset, Trajectory, TrajectoryGroup
from ..samplers.base import Sampler
from .engine import ErrorStrategy, FailFast, RolloutBudget, run_rollout_batch
from .metrics import rollout_metrics, summarize

SuccessFn = Callable[[Trajectory, float], bool]
"""``is_success(trajectory, total_reward) -> bool``: whether an episode solved its problem."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of the probability that at least one of ``k`` samples is right, from ``c`` right answers
    among ``n`` samples of the same problem (Chen et al. 2021): ``1 - C(n - c, k) / C(n, k)``.

    Raises:
        ValueError: unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class TagStats:
    """Evaluation numbers of the episodes of one logging tag (``all`` = every episode).

    Attributes:
        mean_reward, std_reward: mean and population std of the episodes' total rewards.
        num_episodes, num_problems: episodes and env groups counted.
        success_rate: share of solved episodes (pass@1 when every problem has as many samples).
        pass_at_k: ``{k: mean over problems of pass@k}``.
    """

    mean_reward: float
    std_reward: float
    num_episodes: int
    num_problems: int
    success_rate: float
    pass_at_k: dict[int, float] = field(default_factory=dict)


@dataclass
class EvalResult:
    """What :func:`evaluate` measured.

    Attributes:
        mean_reward, std_reward: over all episodes (population std, as Stable-Baselines3's ``evaluate_policy``).
        num_episodes: episodes played (skipped groups excluded).
        metrics: the mean of every env metric (``env/<tag>/<name>``).
        groups: the trajectory groups, for closer inspection (``None`` for a group skipped after errors).
        episode_rewards: every episode's total reward, in dataset order (SB3's ``return_episode_rewards``).
        num_problems: env groups played.
        pass_at_k: ``{k: pass@k}`` over all problems.
        per_tag: :class:`TagStats` per logging tag, ``"all"`` first.
        success_threshold: an episode with a total reward above it counted as solved (unless ``is_success`` was
            given).
    """

    mean_reward: float
    std_reward: float
    num_episodes: int
    metrics: dict[str, float] = field(default_factory=dict)
    groups: list[TrajectoryGroup | None] = field(default_factory=list, repr=False)
    episode_rewards: list[float] = field(default_factory=list, repr=False)
    num_problems: int = 0
    pass_at_k: dict[int, float] = field(default_factory=dict)
    per_tag: dict[str, TagStats] = field(default_factory=dict)
    success_threshold: float = 0.0

    def to_dict(self) -> dict:
        """Everything but the trajectories, as JSON-ready types (``pass@k`` keys become strings)."""
        return {
            "mean_reward": self.mean_reward,
            "std_reward": self.std_reward,
            "num_episodes": self.num_episodes,
            "num_problems": self.num_problems,
            "success_threshold": self.success_threshold,
            "pass_at_k": {str(k): v for k, v in self.pass_at_k.items()},
            "per_tag": {
                tag: {**asdict(s), "pass_at_k": {str(k): v for k, v in s.pass_at_k.items()}}
                for tag, s in self.per_tag.items()
            },
            "metrics": dict(self.metrics),
            "episode_rewards": list(self.episode_rewards),
        }

    def to_json(self, path: str | os.PathLike[str], **extra) -> None:
        """Write :meth:`to_dict` (plus ``extra`` top-level keys, e.g. the run's settings) to ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            json.dump({**extra, **self.to_dict()}, f, indent=2)
            f.write("\n")

    def format_table(self) -> str:
        """A plain-text table: one row per tag with episodes, problems, mean ± std reward and pass@k."""
        ks = sorted(self.pass_at_k)
        header = ["tag", "episodes", "problems", "reward (mean ± std)"] + [f"pass@{k}" for k in ks]
        rows = [
            [tag, str(s.num_episodes), str(s.num_problems), f"{s.mean_reward:.3f} ± {s.std_reward:.3f}"]
            + [f"{s.pass_at_k[k]:.3f}" if k in s.pass_at_k else "-" for k in ks]
            for tag, s in self.per_tag.items()
        ]
        widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

        def line(cells: list[str]) -> str:  # the tag left-aligned, numbers right-aligned
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def evaluate(
    sampler: Sampler,
    dataset: RLDataset,
    num_batches: int | None = None,
    budget: RolloutBudget | None = None,
    strategy: ErrorStrategy = FailFast(),
    *,
    num_problems: int | None = None,
    ks: Sequence[int] | None = None,
    success_threshold: float = 0.0,
    is_success: SuccessFn | None = None,
    seed: int | None = None,
    chunk_size: int | None = None,
    progress: bool = False,
    max_wait_s: float | None = 30.0,
    at_most: bool = False,
) -> EvalResult:
    """Play the env groups of ``dataset`` with ``sampler`` and measure rewards and pass@k.

    Args:
        sampler: the policy (e.g. :class:`~trl_envs.samplers.hf.HFSampler`; temperature 0 is greedy).
        dataset: the envs, usually an env's test split; its groups are the problems and their envs the samples.
        num_batches: play only the first ``num_batches`` batches (default: all).
        budget, strategy: rollout budget and error strategy, as in training.
        num_problems: play only the first ``num_problems`` groups (after ``num_batches``).
        ks: the k of pass@k (default: 1 and the smallest group size); each must be at most the smallest group size.
        success_threshold, is_success: when an episode counts as solved (see the module docstring).
        seed: seeds Python, NumPy and torch (``transformers.set_seed``) before playing, so sampled evaluations repeat
            exactly. Leave ``None`` to keep the current random state.
        chunk_size: play at most this many groups at once (default: all at once); bounds memory on long runs. The
            sampled numbers depend on it (batches are sampled together).
        progress: show a progress bar (tqdm, on stderr) over the problems.
        max_wait_s: see :func:`~trl_envs.rollout.engine.run_rollout_batch`.
        at_most: ``num_problems`` is an upper bound: a dataset with fewer problems is played whole (each problem
            once) instead of raising.

    Raises:
        ValueError: for a ``k`` larger than some group, or ``num_problems`` larger than the dataset.
        RuntimeError: when every group was skipped after errors.
    """
    builders = _select_builders(dataset, num_batches, num_problems, at_most)
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"evaluate: chunk_size must be >= 1, got {chunk_size}")
    if seed is not None:
        from transformers import set_seed

        set_seed(seed)
    from tqdm.auto import tqdm

    groups: list[TrajectoryGroup | None] = []
    errors: Counter[str] = Counter()
    step = chunk_size or len(builders)
    with tqdm(total=len(builders), unit="problem", desc="evaluate", disable=not progress) as bar:
        for start in range(0, len(builders), step):
            chunk = builders[start : start + step]
            result = run_rollout_batch(chunk, sampler, budget, strategy, max_wait_s)
            groups.extend(result.groups)
            errors.update(result.error_counts)
            bar.update(len(chunk))
    return summarize_groups(groups, dict(errors), ks=ks, success_threshold=success_threshold, is_success=is_success)


def summarize_groups(
    groups: Sequence[TrajectoryGroup | None],
    error_counts: dict[str, int] | None = None,
    *,
    ks: Sequence[int] | None = None,
    success_threshold: float = 0.0,
    is_success: SuccessFn | None = None,
) -> EvalResult:
    """The :class:`EvalResult` of already played groups (what :func:`evaluate` returns after playing)."""
    played = [g for g in groups if g is not None]
    if not played:
        raise RuntimeError(
            f"evaluate: all {len(groups)} groups were skipped after errors "
            f"(error counts: {error_counts or {}}); nothing to report"
        )
    smallest = min(len(g.trajectories) for g in played)
    ks = sorted(set(ks)) if ks is not None else sorted({1, smallest})
    if not ks or ks[0] < 1 or ks[-1] > smallest:
        raise ValueError(
            f"evaluate: pass@k needs 1 <= k <= the samples per problem; the smallest group has "
            f"{smallest} envs, asked for k in {ks}"
        )
    solved = is_success or (lambda trajectory, total: total > success_threshold)

    by_tag: dict[str, list[tuple[list[float], int]]] = defaultdict(list)  # tag -> per group (totals, #solved)
    for group in played:
        totals = group.get_total_rewards()
        c = sum(bool(solved(t, r)) for t, r in zip(group.trajectories, totals))
        for tag in ["all"] + [t for t in group.tags if t != "all"]:
            by_tag[tag].append((totals, c))
    per_tag = {tag: _tag_stats(entries, ks) for tag, entries in by_tag.items()}
    overall = per_tag["all"]
    return EvalResult(
        mean_reward=overall.mean_reward,
        std_reward=overall.std_reward,
        num_episodes=overall.num_episodes,
        metrics=summarize(rollout_metrics(list(groups), error_counts or {})),
        groups=list(groups),
        episode_rewards=[r for g in played for r in g.get_total_rewards()],
        num_problems=overall.num_problems,
        pass_at_k=dict(overall.pass_at_k),
        per_tag=per_tag,
        success_threshold=success_threshold,
    )


def _tag_stats(entries: list[tuple[list[float], int]], ks: Sequence[int]) -> TagStats:
    rewards = [r for totals, _ in entries for r in totals]
    return TagStats(
        mean_reward=statistics.fmean(rewards),
        std_reward=statistics.pstdev(rewards),
        num_episodes=len(rewards),
        num_problems=len(entries),
        success_rate=sum(c for _, c in entries) / len(rewards),
        pass_at_k={k: statistics.fmean(pass_at_k(len(totals), c, k) for totals, c in entries) for k in ks},
    )


def _select_builders(
    dataset: RLDataset, num_batches: int | None, num_problems: int | None, at_most: bool = False
) -> list[EnvGroupBuilder]:
    if num_problems is not None and num_problems < 1:
        raise ValueError(f"evaluate: num_problems must be >= 1, got {num_problems}")
    n = len(dataset) if num_batches is None else min(num_batches, len(dataset))
    builders: list[EnvGroupBuilder] = []
    for i in range(n):
        if num_problems is not None and len(builders) >= num_problems:
            break
        builders.extend(dataset.get_batch(i))
    if num_problems is not None:
        if len(builders) < num_problems and not at_most:
            raise ValueError(
                f"evaluate: asked for {num_problems} problems but the dataset "
                f"({type(dataset).__name__}, {n} batches) holds {len(builders)}"
            )
        builders = builders[:num_problems]
    if not builders:
        raise ValueError(f"evaluate: the dataset ({type(dataset).__name__}) has no env groups")
    return builders
