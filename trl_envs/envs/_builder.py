"""The shared shape of the built-in envs' datasets and dataset builders."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..core.renderer import Renderer
from ..core.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder

BUILTIN_TEST_SEED_OFFSET = 10_000
"""The test set of a built-in env is its training recipe with seed ``test_seed + BUILTIN_TEST_SEED_OFFSET`` (the
Gymnasium datasets of :mod:`trl_envs.gym.env` have their own ``TEST_SEED_OFFSET``)."""


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
    ``num_test_batches`` batches, made by :meth:`dataset` with ``seed`` and ``test_seed + BUILTIN_TEST_SEED_OFFSET``.

    ``seed`` picks the training problems and their order (the scripts pass the trainer's seed, so every training
    seed sees its own sequence); ``test_seed`` picks the held-out problems, which stay the same whatever ``seed``.

    Subclasses add their own fields (after these; ``seed`` and ``test_seed`` are keyword-only) and define
    :meth:`dataset`.

    Raises:
        ValueError: ``seed`` equals ``test_seed + BUILTIN_TEST_SEED_OFFSET`` (training would replay the test set).
    """

    renderer: Renderer
    batch_size: int = 4
    group_size: int = 4
    num_batches: int = 1000
    num_test_batches: int = 2
    seed: int = field(default=0, kw_only=True)
    test_seed: int = field(default=0, kw_only=True)

    def __post_init__(self) -> None:
        if self.seed == self.test_seed + BUILTIN_TEST_SEED_OFFSET:
            raise ValueError(f"{type(self).__name__}: seed={self.seed} is the test set's seed (test_seed + "
                             f"{BUILTIN_TEST_SEED_OFFSET}); training would replay the held-out problems. Pick another "
                             "seed.")

    def dataset(self, num_batches: int, seed: int) -> RLDataset:
        raise NotImplementedError(f"{type(self).__name__} must define dataset(num_batches, seed)")

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        return (self.dataset(self.num_batches, self.seed),
                self.dataset(self.num_test_batches, self.test_seed + BUILTIN_TEST_SEED_OFFSET))
