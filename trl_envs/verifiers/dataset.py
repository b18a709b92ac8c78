"""A verifiers environment as training and test datasets: each task of its taskset is one GRPO group of
``group_size`` episodes, each episode one run of the environment's own rollout against the policy's endpoint."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..agents import AgentDataset
from ..core.renderer import Renderer
from ..core.types import RLDataset, RLDatasetBuilder
from ..envs import check_int_option
from .episode import VerifiersAgent
from .source import VerifiersSource


@dataclass
class VerifiersDatasetBuilder(RLDatasetBuilder):
    """Train (and test) datasets of a verifiers environment.

    ``VerifiersDatasetBuilder("my-env", renderer, taskset={"num_tasks": 64})`` — or a loaded ``vf.Env`` as ``env``.
    Each batch has ``batch_size`` tasks; each task is one group of ``group_size`` episodes (GRPO's
    ``num_generations``). The first pass over the training tasks keeps the taskset's order, later passes are
    shuffled with ``seed`` (left ``None``, the trainer's seed). The test split is the environment's held-out tasks
    (``test_taskset`` or ``num_test_tasks``, see :class:`~trl_envs.verifiers.source.VerifiersSource`), each played
    once (``num_test_batches`` caps it; the last batch is shorter rather than wrapping round); without one the builder
    returns no test dataset.

    Each group is logged under the tag ``tag`` (default: the environment's id): its reward components and metrics
    as ``env/<tag>/<name>``, with ``num_turns``, ``agent_calls`` and ``history_rewrites``.
    """

    env: Any
    renderer: Renderer
    batch_size: int = 4
    group_size: int = 4
    num_batches: int = 1000
    num_test_batches: int | None = None
    taskset: Mapping[str, Any] | None = None
    env_config: Mapping[str, Any] | None = None
    test_taskset: Mapping[str, Any] | None = None
    num_test_tasks: int = 0
    max_tasks: int | None = None
    tag: str | None = None
    model: str = "policy"
    seed: int | None = field(default=None, kw_only=True)
    source: VerifiersSource = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.source = VerifiersSource(
            self.env,
            taskset=self.taskset,
            env_config=self.env_config,
            test_taskset=self.test_taskset,
            num_test_tasks=self.num_test_tasks,
            max_tasks=self.max_tasks,
        )
        where = f"verifiers/{self.source.name}"
        for option in ("batch_size", "group_size", "num_batches"):
            check_int_option(where, option, getattr(self, option), 1)
        if self.num_test_batches is not None:
            check_int_option(where, "num_test_batches", self.num_test_batches, 1)
        if self.seed is not None:
            check_int_option(where, "seed", self.seed)
        if self.source.env_id is not None:
            self.source.config()  # a config the environment rejects fails here, before any model loads
            if self.test_taskset is not None:
                self.source.config(self.test_taskset)

    def agent(self) -> VerifiersAgent:
        """The agent program every episode runs (:class:`~trl_envs.verifiers.episode.VerifiersAgent`)."""
        return VerifiersAgent(self.source, self.model)

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train_tasks, test_tasks = self.source.splits()
        agent, tags = self.agent(), [self.tag or self.source.name]
        sizes = {"batch_size": self.batch_size, "group_size": self.group_size, "tags": tags}
        train = AgentDataset(
            agent, train_tasks, self.renderer, num_batches=self.num_batches, seed=self.seed or 0, **sizes
        )
        if not test_tasks:
            return train, None
        test = AgentDataset(agent, test_tasks, self.renderer, num_batches=self.num_test_batches, distinct=True, **sizes)
        return train, test
