"""``reasoning_gym/<task>`` names as env kinds of the registry, and the train / held-out datasets of a task.

By name, ``--env_kwargs`` holds the task's reasoning-gym config (``size``, difficulty options such as
``min_terms``; see the task's ``*Config`` class) next to this adapter's options (``answer_tag``, ``format_coef``) and
the usual sizes. ``seed`` is the config's seed for the training split; the test split uses ``test_seed +
TEST_SEED_OFFSET`` and leaves out every question the training split (its ``size`` entries) also has, so it is
held out. ``reasoning_gym/composite`` takes ``datasets: [{"name", "weight", "config"}]`` and tags each group with
its source task.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..core.renderer import Renderer
from ..core.types import TEST_SEED_OFFSET, EnvGroupBuilder, RLDataset
from ..envs import BuiltinDataset, BuiltinDatasetBuilder, check_number_option
from ..registry.names import EnvKind, unknown_prefixed_name
from .env import PREFIX, ReasoningGymGroupBuilder, procedural_dataset, task_names


class ReasoningGymDataset(BuiltinDataset):
    """Batches of groups over the entries ``indices`` of ``task``'s dataset made with ``config``; batch ``i`` takes
    the next ``batch_size`` entries in an order fixed by ``order_seed`` (cycling when the run outlasts them)."""

    def __init__(
        self,
        renderer: Renderer,
        batch_size: int,
        group_size: int,
        num_batches: int,
        task: str,
        config: dict[str, Any],
        indices: Sequence[int],
        answer_tag: str | None,
        format_coef: float,
        order_seed: int = 0,
    ):
        super().__init__(renderer, batch_size, group_size, num_batches)
        self.task, self.config, self.answer_tag, self.format_coef = task, config, answer_tag, format_coef
        self.indices = list(indices)
        random.Random(f"{PREFIX}{task}/{order_seed}").shuffle(self.indices)

    def make_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        start = index * self.batch_size
        return [
            ReasoningGymGroupBuilder(
                self.renderer,
                self.task,
                self.indices[(start + j) % len(self.indices)],
                self.group_size,
                self.config,
                self.answer_tag,
                self.format_coef,
            )
            for j in range(self.batch_size)
        ]


@dataclass
class ReasoningGymDatasetBuilder(BuiltinDatasetBuilder):
    """A reasoning-gym task: training problems from the config's ``seed``, held-out test problems from another."""

    env_name: ClassVar[str] = "reasoning_gym"

    config: dict[str, Any] = field(default_factory=dict)
    answer_tag: str | None = None
    format_coef: float = 0.1
    task: str = field(default="basic_arithmetic", kw_only=True)

    def check_options(self) -> None:
        self.env_name = PREFIX + self.task
        super().check_options()
        check_number_option(self.env_name, "format_coef", self.format_coef)
        if self.answer_tag is not None and (not isinstance(self.answer_tag, str) or not self.answer_tag.isidentifier()):
            raise ValueError(
                f"env {self.env_name!r}: option 'answer_tag' must be a tag name such as 'answer', got "
                f"{self.answer_tag!r}"
            )
        procedural_dataset(self.task, self._config(self.train_seed))  # a bad config fails here, before any model loads

    def _config(self, seed: int, size: int | None = None) -> dict[str, Any]:
        config = {**self.config, "seed": seed}
        if size is not None:
            config["size"] = size
        return config

    def dataset(self, num_batches: int, seed: int) -> RLDataset:
        config = self._config(seed)
        return ReasoningGymDataset(
            self.renderer,
            self.batch_size,
            self.group_size,
            num_batches,
            self.task,
            config,
            range(len(procedural_dataset(self.task, config))),
            self.answer_tag,
            self.format_coef,
            seed,
        )

    def test_dataset(self) -> RLDataset:
        """The held-out split: entries of another seed whose questions the training split does not have."""
        train = procedural_dataset(self.task, self._config(self.train_seed))
        seen = {entry["question"] for entry in train}
        trained = len(seen)
        wanted = self.num_test_batches * self.batch_size
        config = self._config(self.test_seed + TEST_SEED_OFFSET, max(wanted * 2, self.config.get("size", 0) or 0))
        test = procedural_dataset(self.task, config)
        indices = []  # each held-out question once: a procedural config can ask the same question twice
        for i in range(len(test)):
            if len(indices) < wanted and test[i]["question"] not in seen:
                seen.add(test[i]["question"])
                indices.append(i)
        if len(indices) < wanted:
            raise ValueError(
                f"env {self.env_name!r}: only {len(indices)} of the {wanted} test problems asked for are "
                f"held out: the training split's {len(train)} entries ask {trained} distinct questions, and the "
                f"config allows only {len(seen) - trained} others. Lower the training 'size' (or ask fewer test "
                "problems) so that some questions are never trained on"
            )
        return ReasoningGymDataset(
            self.renderer,
            self.batch_size,
            self.group_size,
            self.num_test_batches,
            self.task,
            config,
            indices,
            self.answer_tag,
            self.format_coef,
            self.test_seed,
        )

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        return self.dataset(self.num_batches, self.train_seed), self.test_dataset()


OWN_OPTIONS = (
    "batch_size",
    "group_size",
    "num_batches",
    "num_test_batches",
    "seed",
    "test_seed",
    "answer_tag",
    "format_coef",
)
"""``--env_kwargs`` keys of this adapter; every other key is the task's reasoning-gym config."""


def without_nulls(config: dict | None) -> dict:
    """``config`` without ``None`` values: a ``datasets.Dataset`` stores a dict column as one struct, so a row's
    config gets ``None`` for every key another row has and it has not."""
    return {k: v for k, v in (config or {}).items() if v is not None}


def env_kind(name: str) -> EnvKind:
    """The kind of ``reasoning_gym/<task>``; :class:`~trl_envs.registry.names.UnknownEnvError` with the closest task
    names for one reasoning-gym does not have."""
    task = name[len(PREFIX) :]
    names = task_names()
    if task not in names:
        raise unknown_prefixed_name(name, "reasoning-gym", [PREFIX + t for t in names])

    def factory(renderer: Renderer, **options: Any) -> ReasoningGymDatasetBuilder:
        own = {k: options.pop(k) for k in OWN_OPTIONS if k in options}
        return ReasoningGymDatasetBuilder(renderer=renderer, task=task, config=options, **own)

    def from_row(
        renderer: Renderer,
        group_size: int,
        *,
        index: int,
        config: dict | None = None,
        answer_tag: str | None = None,
        format_coef: float = 0.1,
    ) -> ReasoningGymGroupBuilder:
        """One problem: entry ``index`` of the task's dataset made with ``config``."""
        if index < 0:
            raise ValueError(f"field 'index' must be >= 0, got {index}")
        return ReasoningGymGroupBuilder(
            renderer, task, index, group_size, without_nulls(config), answer_tag, format_coef
        )

    description = f"reasoning-gym {task}: single turn, scored by its score_answer"
    factory.__doc__ = description
    return EnvKind(name, description, factory, from_row, "reasoning_gym")


def env_names() -> dict[str, str]:
    """Every reasoning-gym task as ``reasoning_gym/<task>``."""
    return {PREFIX + t: "reasoning-gym task (single turn, its score_answer as reward)" for t in task_names()}
