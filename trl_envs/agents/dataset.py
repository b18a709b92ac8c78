"""Task datasets for agents: a list of tasks (or a ``datasets.Dataset``) and an agent function as an
:class:`~trl_envs.core.types.RLDataset`, and train/test splits as an :class:`~trl_envs.core.types.RLDatasetBuilder`
(what ``scripts/train_grpo.py --env my_pkg.agents:make_dataset`` takes)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from ..core.renderer import Renderer
from ..core.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder
from .env import AgentFn, AgentGroupBuilder, RewardFn
from .prompts import PromptBuilder


class AgentDataset(RLDataset):
    """Batches of ``batch_size`` tasks, each task one group of ``group_size`` runs of ``agent``.

    Args:
        agent: ``agent(base_url, api_key, task)`` (see :mod:`trl_envs.agents.env`).
        tasks: a sequence of tasks (dicts, strings, ...) or a ``datasets.Dataset`` (each row, a dict, is a task).
        renderer: the policy's :class:`~trl_envs.core.renderer.Renderer`.
        batch_size, group_size: groups per batch, runs per group.
        num_batches: batches (default: one pass over the tasks, the last batch wrapping around); more than one pass
            goes over the tasks again, each pass in a new order drawn from ``seed``.
        reward_fn: ``reward_fn(task, result)`` scoring what the agent returns (``None``: it returns the reward).
        seed: the order of the passes after the first (the first pass keeps the dataset's order).
        tags: logging tags of every group.
        distinct: play each task at most once (a test split): at most one pass, the last batch shorter instead of
            wrapping around, so an evaluation counts every task exactly once.
    """

    def __init__(
        self,
        agent: AgentFn,
        tasks: Sequence[Any],
        renderer: Renderer,
        *,
        batch_size: int = 4,
        group_size: int = 4,
        num_batches: int | None = None,
        reward_fn: RewardFn | None = None,
        seed: int = 0,
        tags: Sequence[str] = ("agent",),
        distinct: bool = False,
    ):
        if len(tasks) == 0:
            raise ValueError("AgentDataset: no tasks given")
        for option, value in (("batch_size", batch_size), ("group_size", group_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"AgentDataset: {option} must be an integer >= 1, got {value!r}")
        self.agent, self.tasks, self.reward_fn, self.seed = agent, tasks, reward_fn, seed
        self.prompts = PromptBuilder(renderer)
        self.batch_size, self.group_size, self.tags = batch_size, group_size, list(tags)
        self.num_batches = num_batches if num_batches is not None else -(-len(tasks) // batch_size)
        if self.num_batches < 1:
            raise ValueError(f"AgentDataset: num_batches must be >= 1, got {num_batches!r}")
        if distinct:
            self.num_tasks = min(len(tasks), self.num_batches * batch_size)
            self.num_batches = -(-self.num_tasks // batch_size)
        else:
            self.num_tasks = self.num_batches * batch_size

    def _task(self, i: int) -> Any:
        n = len(self.tasks)
        epoch, j = divmod(i, n)
        if epoch:
            order = list(range(n))
            random.Random(f"agent/{self.seed}/{epoch}").shuffle(order)
            j = order[j]
        return self.tasks[j]

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < self.num_batches:
            raise IndexError(f"AgentDataset: batch {index} out of range (0..{self.num_batches - 1})")
        start = index * self.batch_size
        stop = min(start + self.batch_size, self.num_tasks)
        return [
            AgentGroupBuilder(
                self.agent,
                self._task(i),
                self.prompts,
                self.group_size,
                reward_fn=self.reward_fn,
                tags=self.tags,
            )
            for i in range(start, stop)
        ]

    def __len__(self) -> int:
        return self.num_batches


class AgentDatasetBuilder(RLDatasetBuilder):
    """Train tasks and (optionally) held-out test tasks for ``agent``: ``(AgentDataset, AgentDataset | None)``.

    Keyword arguments are those of :class:`AgentDataset`; ``num_test_batches`` (default: one pass) sizes the test
    set, which plays each test task at most once.
    """

    def __init__(
        self,
        agent: AgentFn,
        tasks: Sequence[Any],
        renderer: Renderer,
        *,
        test_tasks: Sequence[Any] | None = None,
        num_test_batches: int | None = None,
        **kwargs: Any,
    ):
        self.agent, self.tasks, self.test_tasks, self.renderer = agent, tasks, test_tasks, renderer
        self.num_test_batches, self.kwargs = num_test_batches, kwargs
        AgentDataset(agent, tasks, renderer, **kwargs)  # check the options now, before any model loads

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train = AgentDataset(self.agent, self.tasks, self.renderer, **self.kwargs)
        if not self.test_tasks:
            return train, None
        kwargs = {**self.kwargs, "num_batches": self.num_test_batches, "distinct": True}
        return train, AgentDataset(self.agent, self.test_tasks, self.renderer, **kwargs)
