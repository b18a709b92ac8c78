"""The trainer's rows of an :class:`~trl_envs.core.types.RLDataset`: one *group key* per env group, by position.

``EnvGRPOTrainer`` hands TRL a dataset of group keys ``"<split>/<batch>/<position>"`` (TRL repeats each key
``num_generations`` times, one block of G rows per group) and turns a key back into its ``EnvGroupBuilder`` only when
the group is rolled out. The keys come from ``len(dataset)`` and the number of groups of the first and the last batch
(two ``get_batch`` calls), so building a trainer on a dataset of a million batches does not call ``get_batch`` a
million times; a batch whose size does not fit the layout is reported when it is first used.
"""

from __future__ import annotations

import functools

from datasets import Dataset

from ..core.types import EnvGroupBuilder, RLDataset


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

    def key(self, group: int) -> str:
        """The key of the ``group``-th group of the split."""
        batch, position = divmod(group, self.width)
        return f"{self.split}/{batch}/{position}"

    def builder(self, key: str) -> EnvGroupBuilder:
        """The builder of ``key``; the first use of a batch checks that its number of groups fits the layout."""
        split, i, k = key.split("/")
        if split != self.split:
            raise KeyError(key)
        i, k = int(i), int(k)
        batch = self._batch(i)
        expected = self.width if i < self.num_batches - 1 else self.last_width
        if len(batch) != expected:
            raise ValueError(
                f"{self.owner}: batch {i} of the {self.split} RLDataset ({type(self.dataset).__name__}) has "
                f"{len(batch)} env groups, expected {expected} (batch 0 has {self.width}); the trainer lays groups out "
                "by position, so every batch but the last must have as many groups as the first (the last may have "
                "fewer) and get_batch(i) must return the same groups every time it is called"
            )
        return batch[k]

    def as_dataset(self) -> Dataset:
        """TRL's dataset: a ``prompt`` column of the group keys, in order."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        group = np.arange(self.num_groups, dtype=np.int64)  # the keys of key(j), built column-wise in Arrow
        batch, position = (pa.array(part).cast(pa.string()) for part in divmod(group, self.width))
        return Dataset.from_dict({"prompt": pc.binary_join_element_wise(self.split, batch, position, "/")})
