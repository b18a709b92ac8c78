"""tinker-cookbook datasets and dataset builders as trl_envs ones, and :func:`adapt` for any of the three."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from tinker_cookbook.rl import types as tc

from ..core.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder
from .group import TinkerGroupBuilder


class TinkerRLDataset(RLDataset):
    """A cookbook ``RLDataset``: same batches, each builder wrapped in a :class:`TinkerGroupBuilder`."""

    def __init__(self, tinker_dataset: tc.RLDataset):
        if not isinstance(tinker_dataset, tc.RLDataset):
            raise TypeError(
                f"TinkerRLDataset: expected a tinker_cookbook RLDataset, got {type(tinker_dataset).__name__}"
            )
        self.tinker_dataset = tinker_dataset

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [TinkerGroupBuilder(b) for b in self.tinker_dataset.get_batch(index)]

    def __len__(self) -> int:
        return len(self.tinker_dataset)


class TinkerDatasetBuilder(RLDatasetBuilder):
    """A cookbook ``RLDatasetBuilder`` (a chz dataclass whose ``__call__`` is async in tinker-cookbook 0.5.8; a
    synchronous one is accepted too): ``await builder()`` gives ``(train, test_or_None)``, both wrapped."""

    def __init__(self, tinker_builder: tc.RLDatasetBuilder):
        if not isinstance(tinker_builder, tc.RLDatasetBuilder):
            raise TypeError(
                f"TinkerDatasetBuilder: expected a tinker_cookbook RLDatasetBuilder, got "
                f"{type(tinker_builder).__name__}"
            )
        self.tinker_builder = tinker_builder

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        out = self.tinker_builder()
        if inspect.isawaitable(out):
            out = await out
        name = type(self.tinker_builder).__name__
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(f"{name}() must return (train_dataset, test_dataset_or_None), got {type(out).__name__}")
        train, test = out
        return TinkerRLDataset(train), (None if test is None else TinkerRLDataset(test))


def adapt(obj: Any) -> TinkerDatasetBuilder | TinkerRLDataset | TinkerGroupBuilder:
    """The trl_envs object for a tinker-cookbook one: an ``RLDatasetBuilder`` becomes a
    :class:`TinkerDatasetBuilder`, an ``RLDataset`` a :class:`TinkerRLDataset`, an ``EnvGroupBuilder`` a
    :class:`TinkerGroupBuilder`. Pass the results to ``EnvGRPOTrainer`` / ``EnvDPOTrainer`` as ``env_dataset``
    (a single group builder: wrap it in ``ListRLDataset([builder], batch_size=1)``).

    Raises ``TypeError`` naming the type for anything else.
    """
    if isinstance(obj, tc.RLDatasetBuilder):
        return TinkerDatasetBuilder(obj)
    if isinstance(obj, tc.RLDataset):
        return TinkerRLDataset(obj)
    if isinstance(obj, tc.EnvGroupBuilder):
        return TinkerGroupBuilder(obj)
    raise TypeError(
        f"trl_envs.tinker.adapt: expected a tinker_cookbook RLDatasetBuilder, RLDataset or "
        f"EnvGroupBuilder instance, got {type(obj).__name__}"
    )
