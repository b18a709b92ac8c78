"""The trainer's rows of an :class:`~trl_envs.core.types.RLDataset`: one :class:`GroupKey` per env group, by position.

``EnvGRPOTrainer`` hands TRL a dataset whose ``prompt`` column holds one key text per env group (TRL repeats each row
``num_generations`` times in a row, one block of G rows per group) and turns a key back into its ``EnvGroupBuilder``
only when the group is rolled out. The keys come from ``len(dataset)`` and the number of groups of the first and the
last batch (two ``get_batch`` calls), so building a trainer on a dataset of a million batches does not call
``get_batch`` a million times; a batch whose size does not fit the layout is reported when it is first used.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from datasets import Dataset

from ..core.types import EnvGroupBuilder, RLDataset

SEPARATOR = "/"


@dataclass(frozen=True)
class GroupKey:
    """Where an env group lives: group ``position`` of batch ``batch`` of the ``split`` (``"train"`` / ``"eval"``)
    env dataset. Its text (``str(key)``, ``"train/3/1"``) is the trainer's dataset row; :meth:`parse` reads it back."""

    split: str
    batch: int
    position: int

    def __str__(self) -> str:
        return f"{self.split}{SEPARATOR}{self.batch}{SEPARATOR}{self.position}"

    @classmethod
    def parse(cls, key: GroupKey | str) -> GroupKey:
        """The key ``key`` names (a ``GroupKey`` is returned as is). Raises ``ValueError`` for text that is not
        ``"<split>/<batch>/<position>"`` with non-negative integers."""
        if isinstance(key, GroupKey):
            return key
        parts = key.split(SEPARATOR) if isinstance(key, str) else []
        if len(parts) != 3 or not parts[0] or not parts[1].isdigit() or not parts[2].isdigit():
            raise ValueError(f"GroupKey.parse: {key!r} is not a group key '<split>/<batch>/<position>'")
        return cls(parts[0], int(parts[1]), int(parts[2]))


def keys_of_rows(prompts: Sequence[str], group_size: int, owner: str = "EnvGRPOTrainer") -> list[GroupKey]:
    """The group keys of a generation batch as TRL hands it over: each group's key text repeated ``group_size`` times
    in a row. Raises ``ValueError`` when the rows are not such blocks (a group would straddle ranks, or TRL's sampler
    did not repeat each row ``num_generations`` times)."""
    if len(prompts) % group_size:
        raise ValueError(
            f"{owner}: this rank got {len(prompts)} rows, not a multiple of the group size {group_size}; a group "
            "would straddle ranks"
        )
    keys = []
    for start in range(0, len(prompts), group_size):
        block = prompts[start : start + group_size]
        if any(p != block[0] for p in block):
            raise ValueError(
                f"{owner}: rows {start}..{start + group_size - 1} mix env groups {sorted(set(map(str, block)))}; "
                "TRL must repeat each group key num_generations times in a row"
            )
        keys.append(GroupKey.parse(block[0]))
    return keys


class GroupIndex:
    """Group keys of ``dataset`` and the builder behind each key.

    Layout: every batch but the last has as many groups as batch 0 (``width``); the last may have fewer. Group ``j``
    of the split is position ``j % width`` of batch ``j // width``.

    Raises:
        ValueError: at construction, a dataset without batches, a first batch without groups, or a last batch with
            more groups than the first; on first use of a batch (:meth:`builder`), a batch whose number of groups
            does not fit the layout (named with its index and both sizes).
    """

    def __init__(self, split: str, dataset: RLDataset, owner: str = "EnvGRPOTrainer"):
        if not split or SEPARATOR in split:
            raise ValueError(f"{owner}: a split name must be non-empty and without {SEPARATOR!r}, got {split!r}")
        self.split, self.dataset, self.owner = split, dataset, owner
        self.num_batches = len(dataset)
        if self.num_batches == 0:
            raise ValueError(f"{owner}: the {split} RLDataset ({type(dataset).__name__}) has no batches")
        self._batch = functools.lru_cache(maxsize=8)(dataset.get_batch)
        self.width = len(self._batch(0))
        if self.width == 0:
            raise ValueError(f"{owner}: batch 0 of the {split} RLDataset ({type(dataset).__name__}) has no env groups")
        self.last_width = len(self._batch(self.num_batches - 1)) if self.num_batches > 1 else self.width
        if not 0 < self.last_width <= self.width:
            raise ValueError(
                f"{owner}: the last batch ({self.num_batches - 1}) of the {split} RLDataset "
                f"({type(dataset).__name__}) has {self.last_width} env groups but batch 0 has "
                f"{self.width}; every batch but the last must have as many groups as the first, and the "
                "last between 1 and that many"
            )
        self.num_groups = self.width * (self.num_batches - 1) + self.last_width

    def key(self, group: int) -> GroupKey:
        """The key of the ``group``-th group of the split."""
        batch, position = divmod(group, self.width)
        return GroupKey(self.split, batch, position)

    def builder(self, key: GroupKey) -> EnvGroupBuilder:
        """The builder of ``key``; the first use of a batch checks that its number of groups fits the layout.
        Raises ``KeyError`` for a key of another split or outside the dataset."""
        if key.split != self.split or not 0 <= key.batch < self.num_batches:
            raise KeyError(f"{self.owner}: no env group {str(key)!r} in the {self.split} env dataset")
        batch = self._batch(key.batch)
        expected = self.width if key.batch < self.num_batches - 1 else self.last_width
        if len(batch) != expected:
            raise ValueError(
                f"{self.owner}: batch {key.batch} of the {self.split} RLDataset ({type(self.dataset).__name__}) has "
                f"{len(batch)} env groups, expected {expected} (batch 0 has {self.width}); the trainer lays groups out "
                "by position, so every batch but the last must have as many groups as the first (the last may have "
                "fewer) and get_batch(i) must return the same groups every time it is called"
            )
        if not 0 <= key.position < len(batch):
            raise KeyError(f"{self.owner}: no env group {str(key)!r} in the {self.split} env dataset")
        return batch[key.position]

    def as_dataset(self) -> Dataset:
        """TRL's dataset: a ``prompt`` column of the keys' texts (``str(self.key(j))``), in order."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        group = np.arange(self.num_groups, dtype=np.int64)  # str(key(j)) for every j, built column-wise in Arrow
        batch, position = (pa.array(part).cast(pa.string()) for part in divmod(group, self.width))
        return Dataset.from_dict({"prompt": pc.binary_join_element_wise(self.split, batch, position, SEPARATOR)})
