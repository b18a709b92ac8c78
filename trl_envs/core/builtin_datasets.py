"""The shared shape of the built-in envs' datasets and dataset builders (also used by the game and reasoning-gym
adapters)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .renderer import Renderer
from .types import TEST_SEED_OFFSET, EnvGroupBuilder, RLDataset, RLDatasetBuilder


def check_int_option(env: str, option: str, value: Any, minimum: int | None = None) -> None:
    """Raise a ``ValueError`` naming the env and the option unless ``value`` is an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"env {env!r}: option {option!r} must be an integer{bound}, got {value!r}")


def check_number_option(env: str, option: str, value: Any, *, positive: bool = False) -> None:
    """Raise a ``ValueError`` naming the env and the option unless ``value`` is a finite number (> 0 if
    ``positive``)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or (positive and value <= 0)
    ):
        raise ValueError(
            f"env {env!r}: option {option!r} must be a finite number{' > 0' if positive else ''}, got {value!r}"
        )


class BuiltinDataset(RLDataset):
    """``num_batches`` batches of ``batch_size`` groups of ``group_size`` envs; subclasses define :meth:`make_batch`,
    called with an index already checked to be in range."""

    def __init__(self, renderer: Renderer, batch_size: int, group_size: int, num_batches: int):
        self.renderer, self.batch_size = renderer, batch_size
        self.group_size, self.num_batches = group_size, num_batches

    def make_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        raise NotImplementedError(f"{type(self).__name__} must define make_batch(index)")

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < self.num_batches:
            raise IndexError(f"{type(self).__name__}: batch {index} out of range (0..{self.num_batches - 1})")
        return self.make_batch(index)

    def __len__(self) -> int:
        return self.num_batches


@dataclass
class BuiltinDatasetBuilder(RLDatasetBuilder):
    """Train and test datasets of ``batch_size`` groups of ``group_size`` envs per batch: ``num_batches`` and
    ``num_test_batches`` batches, made by :meth:`dataset` with ``seed`` and ``test_seed + TEST_SEED_OFFSET``
    (:data:`trl_envs.core.types.TEST_SEED_OFFSET`).

    ``seed`` picks the training problems and their order; left ``None``, a trainer sets it to its own ``seed`` (so
    every training seed sees its own sequence) and a builder used alone uses 0. ``test_seed`` picks the held-out
    problems, which stay the same whatever ``seed``.

    Subclasses add their own fields (after these; ``seed`` and ``test_seed`` are keyword-only) and define
    :meth:`dataset`; they name themselves in ``env_name`` and list their integer options with their least allowed
    value in ``int_options`` (checked with the shared sizes when the builder is made; override :meth:`check_options`
    for more).

    Raises:
        ValueError: a bad option, or ``seed`` equal to ``test_seed + TEST_SEED_OFFSET`` (training would
            replay the test set).
    """

    env_name: ClassVar[str] = "builtin"
    int_options: ClassVar[dict[str, int]] = {}

    renderer: Renderer
    batch_size: int = 4
    group_size: int = 4
    num_batches: int = 1000
    num_test_batches: int = 2
    seed: int | None = field(default=None, kw_only=True)
    test_seed: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        self.check_options()

    def check_options(self) -> None:
        """Raise a ``ValueError`` naming the env and the option for a bad value (before any model or env is made)."""
        sizes = {"batch_size": 1, "group_size": 1, "num_batches": 1, "num_test_batches": 1}
        for option, minimum in {**sizes, **self.int_options}.items():
            check_int_option(self.env_name, option, getattr(self, option), minimum)
        if self.seed is not None:
            check_int_option(self.env_name, "seed", self.seed)
        check_int_option(self.env_name, "test_seed", self.test_seed)
        if self.train_seed == self.test_seed + TEST_SEED_OFFSET:
            raise ValueError(
                f"{type(self).__name__}: seed={self.train_seed} is the test set's seed (test_seed + "
                f"{TEST_SEED_OFFSET}); training would replay the held-out problems. Pick another "
                "seed."
            )

    @property
    def train_seed(self) -> int:
        """The seed of the training split: ``seed``, or 0 when it was left to the trainer and no trainer set it."""
        return 0 if self.seed is None else self.seed

    def dataset(self, num_batches: int, seed: int) -> RLDataset:
        """The split of ``num_batches`` batches drawn with ``seed``. An env with :meth:`held_out_split` also takes
        the split's problems as a third argument."""
        raise NotImplementedError(f"{type(self).__name__} must define dataset(num_batches, seed)")

    def held_out_split(self) -> tuple[Sequence, Sequence] | None:
        """``(training problems, test problems)`` when the env holds problems out of training (each split then
        draws only from its own), else ``None`` (both splits draw from every problem, with different seeds)."""
        return None

    def test_dataset(self) -> RLDataset:
        """The test split: ``num_test_batches`` batches drawn with ``test_seed + TEST_SEED_OFFSET`` (from the held-out
        problems when the env holds some out). An env whose problems can repeat overrides it to play each once."""
        split = self.held_out_split()
        return self.dataset(
            self.num_test_batches, self.test_seed + TEST_SEED_OFFSET, *(() if split is None else (split[1],))
        )

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        split = self.held_out_split()
        return self.dataset(
            self.num_batches, self.train_seed, *(() if split is None else (split[0],))
        ), self.test_dataset()
