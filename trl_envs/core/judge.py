"""Group rewards from a pairwise judge: every completion of a group is compared with every other one.

A *judge* compares two completions ``a`` and ``b`` and returns ``1`` (a is better), ``-1`` (b is better) or ``0``
(tie) — any number in ``[-1, 1]`` is accepted, e.g. a preference probability mapped to ``2p - 1``. It is a plain
function, an ``async`` function (a model behind an API), or an object with ``judge_many(pairs)`` that scores many
pairs in one call (:class:`~trl_envs.rollout.model_judge.ModelJudge` asks a chat model that way).

The reward of completion ``i`` in a group of ``n`` is ``sum_j score(i, j) / (n - 1)``: the mean over its ``n - 1``
comparisons of wins minus losses, in ``[-1, 1]``, and the group's rewards sum to zero. This is what a
preference judge can give when it has no absolute scale (a reward model would need one).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from .renderer import Renderer
from .types import Env, EnvGroupBuilder, Metrics, Trajectory


async def judge_pairs(judge: Any, pairs: Sequence[tuple[Any, Any]]) -> list[float]:
    """Scores of ``pairs`` by ``judge`` (see the module docstring), each checked to be a number in [-1, 1]."""
    if not pairs:
        return []
    if hasattr(judge, "judge_many"):
        scores = judge.judge_many(list(pairs))
        if inspect.isawaitable(scores):
            scores = await scores
        scores = list(scores)
        if len(scores) != len(pairs):
            raise ValueError(f"judge {_name(judge)}: judge_many returned {len(scores)} scores for {len(pairs)} pairs")
    else:
        results = [judge(a, b) for a, b in pairs]  # async judges' calls run concurrently
        resolved = iter(await asyncio.gather(*[r for r in results if inspect.isawaitable(r)]))
        scores = [next(resolved) if inspect.isawaitable(r) else r for r in results]
    for (a, b), s in zip(pairs, scores):
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not -1.0 <= s <= 1.0:
            raise ValueError(
                f"judge {_name(judge)} returned {s!r} comparing {a!r:.80} with {b!r:.80}; it must return "
                "1 (first better), -1 (second better), 0 (tie) or a number in between"
            )
    return [float(s) for s in scores]


async def pairwise_rewards(
    items: Sequence[Any], judge: Any, *, both_orders: bool = False
) -> list[tuple[float, Metrics]]:
    """``(reward, metrics)`` per item: the mean over the other items of wins minus losses under ``judge``.

    Each unordered pair is judged once as ``judge(items[i], items[j])`` with ``i < j`` (the score counts for ``i``
    and its negation for ``j``); with ``both_orders=True`` it is also judged as ``judge(items[j], items[i])`` and the
    two are averaged, which cancels a judge's preference for the first (or second) position. Metrics per item:
    ``judge/win``, ``judge/loss``, ``judge/tie`` (fractions of its comparisons).
    """
    n = len(items)
    if n < 2:
        raise ValueError(f"pairwise_rewards: a group needs at least 2 completions to compare, got {n}")
    index_pairs = list(itertools.combinations(range(n), 2))
    forward = await judge_pairs(judge, [(items[i], items[j]) for i, j in index_pairs])
    if both_orders:
        backward = await judge_pairs(judge, [(items[j], items[i]) for i, j in index_pairs])
        forward = [(f - b) / 2 for f, b in zip(forward, backward)]
    total = [0.0] * n
    wins, losses, ties = [0] * n, [0] * n, [0] * n
    for (i, j), s in zip(index_pairs, forward):
        total[i] += s
        total[j] -= s
        for me, score in ((i, s), (j, -s)):
            if score > 0:
                wins[me] += 1
            elif score < 0:
                losses[me] += 1
            else:
                ties[me] += 1
    return [
        (
            total[i] / (n - 1),
            {"judge/win": wins[i] / (n - 1), "judge/loss": losses[i] / (n - 1), "judge/tie": ties[i] / (n - 1)},
        )
        for i in range(n)
    ]


class PairwiseJudgeGroupBuilder(EnvGroupBuilder):
    """Wraps a group builder and adds ``coef ×`` the pairwise-judge reward (:func:`pairwise_rewards`) to its group
    rewards.

    Args:
        inner: makes the envs (and may give group rewards of its own, which are kept).
        judge: compares two completions (see the module docstring).
        renderer: used by the default ``extract``: a completion is the text of the trajectory's last response.
        extract: ``trajectory -> what the judge compares`` (e.g. the whole conversation); overrides the default.
        coef: weight of the judge's reward.
        both_orders: judge every pair in both orders and average (for judges with a position bias).
    """

    def __init__(
        self,
        inner: EnvGroupBuilder,
        judge: Any,
        renderer: Renderer | None = None,
        extract: Callable[[Trajectory], Any] | None = None,
        coef: float = 1.0,
        both_orders: bool = False,
    ):
        if extract is None and renderer is None:
            raise ValueError(
                f"PairwiseJudgeGroupBuilder around {type(inner).__name__}: give a renderer (to compare "
                "the last responses' text) or an extract function"
            )
        self.inner, self.judge, self.renderer, self.extract = inner, judge, renderer, extract
        self.coef, self.both_orders = coef, both_orders

    def completion(self, trajectory: Trajectory) -> Any:
        """What the judge sees of ``trajectory``."""
        if self.extract is not None:
            return self.extract(trajectory)
        if not trajectory.transitions:
            return ""
        return self.renderer.parse_response(trajectory.transitions[-1].ac.tokens).message["content"]

    async def make_envs(self) -> Sequence[Env]:
        return await self.inner.make_envs()

    def coupled_envs(self) -> list[list[int]] | None:
        return self.inner.coupled_envs()

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        base = await self.inner.compute_group_rewards(trajectory_group, env_group)
        judged = await pairwise_rewards(
            [self.completion(t) for t in trajectory_group], self.judge, both_orders=self.both_orders
        )
        return [(float(r) + self.coef * jr, {**m, **jm, "judge/reward": jr}) for (r, m), (jr, jm) in zip(base, judged)]

    async def cleanup(self) -> None:
        await self.inner.cleanup()

    def logging_tags(self) -> list[str]:
        return self.inner.logging_tags()


def _name(judge: Any) -> str:
    return getattr(judge, "__name__", None) or type(judge).__name__
