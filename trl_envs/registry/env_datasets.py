"""Environments as Hugging Face datasets: a ``datasets.Dataset`` of row specs is an
:class:`~trl_envs.core.types.RLDataset`.

* :class:`EnvRowDataset` — the ``RLDataset`` over rows such as ``{"env": "arithmetic", "a": 2, "b": 3}``: each row is
  one env group (built by its env kind's ``from_row``, see :mod:`trl_envs.registry.names`), ``groups_per_batch`` rows a
  batch. Any source works: ``load_dataset`` on a Hub id, a folder or json/parquet files, ``load_from_disk``, a list of
  dicts, a (finite) streamed ``IterableDataset``.
* :func:`export_env_dataset` — the groups a built-in env trains on by name, as a ``Dataset`` of rows (to save, push,
  stream, edit, mix).
* :func:`load_env_dataset` — what ``--env_dataset`` of the scripts accepts.

Row format and design: docs/envs_as_datasets.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict, load_dataset, load_from_disk

from ..core.renderer import Renderer
from ..core.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder
from .names import ENV_FIELD, get_env, make_env_dataset
from .rows import make_env_group_builder, row_env_names, validate_row
from .signatures import accepted_kwargs

DATA_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}
"""File extensions :func:`load_env_dataset` reads, and the ``datasets`` builder for each."""

ROW_FAMILIES = ("reasoning_gym/",)
"""The :data:`~trl_envs.registry.names.PREFIXED_ENVS` families whose envs export as rows (``textarena/`` and
``pettingzoo/`` games take rows, but their by-name groups write none)."""

_CHUNK = 1024


class EnvRowDataset(RLDataset):
    """An :class:`RLDataset` whose env groups are the rows of a dataset of row specs.

    Row ``j`` is group ``j % groups_per_batch`` of batch ``j // groups_per_batch`` (in dataset order: shuffle the
    dataset first, ``rows.shuffle(seed=...)``, for another order); the last batch may be shorter. Every row is checked
    at construction, so a bad row fails before training starts, with its index and field named.

    Args:
        rows: a ``datasets.Dataset``, a ``datasets.IterableDataset`` (read at construction: the first
            ``num_batches * groups_per_batch`` rows, or all of a finite stream), or a sequence of mappings.
        renderer: the renderer of the policy's tokenizer (given to each env kind's ``from_row``).
        group_size: envs per group (for GRPO: ``num_generations``).
        groups_per_batch: rows per batch.
        num_batches: use at most this many batches (default: all rows).
        validate: check every row at construction (default); ``False`` defers errors to :meth:`get_batch`.

    Raises:
        ValueError: no rows, a ``DatasetDict`` (pick a split), a non-positive size, or an
            :class:`~trl_envs.registry.rows.EnvRowError` for a bad row.
        TypeError: ``rows`` is none of the above.
    """

    def __init__(
        self,
        rows: Dataset | IterableDataset | Sequence[Mapping[str, Any]],
        renderer: Renderer,
        group_size: int,
        groups_per_batch: int = 1,
        *,
        num_batches: int | None = None,
        validate: bool = True,
    ):
        if isinstance(rows, (DatasetDict, IterableDatasetDict)):
            raise ValueError(
                f"EnvRowDataset: got a DatasetDict with splits {list(rows)}; pass one split, e.g. rows['train']"
            )
        for label, value in (("group_size", group_size), ("groups_per_batch", groups_per_batch)):
            if value < 1:
                raise ValueError(f"EnvRowDataset: {label} must be >= 1, got {value}")
        if num_batches is not None and num_batches < 1:
            raise ValueError(f"EnvRowDataset: num_batches must be >= 1 or None, got {num_batches}")
        limit = num_batches * groups_per_batch if num_batches is not None else None
        if isinstance(rows, IterableDataset):
            rows = list(rows.take(limit) if limit is not None else rows)
        elif isinstance(rows, Dataset):
            if limit is not None and limit < len(rows):
                rows = rows.select(range(limit))
        elif isinstance(rows, Sequence) and not isinstance(rows, (str, bytes)):
            rows = list(rows[:limit] if limit is not None else rows)
        else:
            raise TypeError(
                f"EnvRowDataset: rows must be a datasets.Dataset, IterableDataset or a sequence of "
                f"mappings, got {type(rows).__name__}"
            )
        if len(rows) == 0:
            raise ValueError("EnvRowDataset: no rows")
        self.rows, self.renderer = rows, renderer
        self.group_size, self.groups_per_batch = group_size, groups_per_batch
        if validate:
            for start in range(0, len(rows), _CHUNK):
                for k, row in enumerate(self._rows(start, start + _CHUNK)):
                    make_env_group_builder(row, renderer, group_size, index=start + k)

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < len(self):
            raise IndexError(f"EnvRowDataset: batch {index} out of range (0..{len(self) - 1})")
        start = index * self.groups_per_batch
        return [
            make_env_group_builder(row, self.renderer, self.group_size, index=start + k)
            for k, row in enumerate(self._rows(start, start + self.groups_per_batch))
        ]

    def __len__(self) -> int:
        return -(-len(self.rows) // self.groups_per_batch)

    @property
    def num_rows(self) -> int:
        """How many rows (env groups) the dataset holds."""
        return len(self.rows)

    def _rows(self, start: int, stop: int) -> list[Mapping[str, Any]]:
        if isinstance(self.rows, Dataset):
            columns = self.rows[start:stop]  # one Arrow read for the slice
            n = len(next(iter(columns.values()))) if columns else 0
            return [{k: v[i] for k, v in columns.items()} for i in range(n)]
        return self.rows[start:stop]


def rows_to_dataset(rows: Iterable[Mapping[str, Any]]) -> Dataset:
    """A ``Dataset`` of row specs with one column per field of *any* row (null where a row lacks it), ``env`` first.

    Use it rather than ``Dataset.from_list``, which keeps only the first row's keys and would silently drop the fields
    of other env kinds in a mixed dataset.
    """
    rows = [dict(r) for r in rows]
    if not rows:
        raise ValueError("rows_to_dataset: no rows")
    keys: dict[str, None] = {ENV_FIELD: None}
    for row in rows:
        keys.update(dict.fromkeys(row))
    return Dataset.from_dict({k: [row.get(k) for row in rows] for k in keys})


def export_env_dataset(name: str, split: str = "train", n: int = 1000, seed: int = 0, **kwargs: Any) -> Dataset:
    """The first ``n`` env groups env ``name`` trains (``split="train"``) or evaluates (``"test"``) on by name, as a
    ``Dataset`` of row specs: training on it (:class:`EnvRowDataset`) plays exactly those groups.

    The env's dataset builder is made with ``kwargs``, ``seed`` and room for ``n`` groups (``renderer=None``: row specs
    do not depend on the tokenizer; the env's own ``group_size`` unless ``kwargs`` give one: a row is one group
    whatever its size) and each group builder's ``to_row()`` gives its row. With the default ``batch_size`` the rows
    come in the order of the by-name dataset's batches.

    Raises:
        ValueError: an env without a row spec or a by-name factory (the message names the envs that export), an
            unknown ``split``, fewer than ``n`` groups available, or an env that cannot be built without a tokenizer.
            So do group builders without ``to_row()``.
        TypeError: the env's factory takes no ``seed`` or returns neither an ``RLDataset`` nor an
            ``RLDatasetBuilder``.
    """
    from ..rollout.event_loop import run_sync

    if split not in ("train", "test"):
        raise ValueError(f"export_env_dataset: split must be 'train' or 'test', got {split!r}")
    if n < 1:
        raise ValueError(f"export_env_dataset: n must be >= 1, got {n}")
    kind = get_env(name)
    if kind.from_row is None or kind.dataset_builder is None:
        missing = "row spec (from_row)" if kind.from_row is None else "by-name dataset"
        raise ValueError(
            f"export_env_dataset: env {name!r} ({kind.source}) has no {missing}, so its groups cannot be written "
            f"as rows (it trains by name: --env {name}); envs that export: {exporting_env_names()}"
        )
    accepted = accepted_kwargs(kind.dataset_builder)
    if accepted is not None and "seed" not in accepted and seed != 0:
        raise TypeError(f"export_env_dataset: env {name!r}'s factory takes no seed")
    group_size = kwargs.pop("group_size", None)
    try:
        made = make_env_dataset(
            name,
            None,
            group_size=group_size,
            num_batches=n if split == "train" else 1,
            defaults={"num_test_batches": n, "seed": seed},
            **kwargs,
        )
        train, test = run_sync(made) if isinstance(made, RLDatasetBuilder) else (made, None)
    except AttributeError as e:  # a factory that reads the renderer (None here) while building its dataset
        raise ValueError(
            f"export_env_dataset: env {name!r} ({kind.source}) reads the tokenizer while it builds its dataset "
            f"({type(e).__name__}: {e}), so it cannot be exported without one; envs that export: "
            f"{exporting_env_names()}"
        ) from e
    dataset = train if split == "train" else test
    if dataset is None:
        raise ValueError(f"export_env_dataset: env {name!r} has no test split")
    rows: list[dict[str, Any]] = []
    for i in range(len(dataset)):
        for builder in dataset.get_batch(i):
            to_row = getattr(builder, "to_row", None)
            if to_row is None:
                raise ValueError(
                    f"export_env_dataset: env {name!r}'s groups ({type(builder).__name__}) have no to_row(), so they "
                    f"cannot be written as rows (rows you write, fields {sorted(kind.row_fields)}, do train); envs "
                    f"that export: {exporting_env_names()}"
                )
            row = dict(to_row())
            validate_row(row, index=len(rows))  # to_row and from_row must agree
            rows.append(row)
            if len(rows) == n:
                return rows_to_dataset(rows)
    raise ValueError(f"export_env_dataset: env {name!r}'s {split} split has only {len(rows)} groups, asked for {n}")


_EXPORTING: dict[str, bool] = {}
"""Env name -> whether its one-row export worked (each named env is tried once per process)."""


def exporting_env_names() -> str:
    """The envs :func:`export_env_dataset` writes as rows, for messages: the named envs whose one-row export works,
    then the :data:`ROW_FAMILIES`."""
    names = row_env_names()
    for env in names:
        if env not in _EXPORTING:
            _EXPORTING[env] = False  # while it is tried: an export failing inside does not try it again
            try:
                export_env_dataset(env, n=1)
                _EXPORTING[env] = True
            except Exception:  # noqa: BLE001 - any failure means: it does not export by itself
                pass
    return ", ".join([env for env in names if _EXPORTING[env]] + [f"{family}<name>" for family in ROW_FAMILIES])


def data_file_builder(files: Sequence[str], what: str) -> str:
    """The ``datasets`` builder (``"json"``, ``"parquet"``, ...) for data files of one kind
    (:data:`DATA_FILE_BUILDERS`); ``ValueError`` naming ``what`` (an option, a dataset) for unknown or mixed kinds."""
    kinds = {DATA_FILE_BUILDERS.get(os.path.splitext(f)[1].lower()) for f in files}
    if None in kinds or len(kinds) != 1:
        raise ValueError(f"{what}: give files of one kind among {sorted(DATA_FILE_BUILDERS)}, got {list(files)}")
    return kinds.pop()


def is_saved_to_disk(path: str) -> bool:
    """Whether ``path`` is a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``."""
    return any(os.path.isfile(os.path.join(path, f)) for f in ("dataset_dict.json", "state.json"))


def load_env_dataset(
    source: str, split: str = "train", *, config_name: str | None = None, streaming: bool = False
) -> Dataset | IterableDataset:
    """Load a dataset of row specs, as the scripts' ``--env_dataset`` does.

    ``source`` is a folder written by ``save_to_disk`` (``Dataset`` or ``DatasetDict``), a data file
    (:data:`DATA_FILE_BUILDERS`), or anything ``datasets.load_dataset`` takes: a Hub id or a folder of data files.
    ``split`` picks the split (a single data file is that split).
    """
    if is_saved_to_disk(source):
        data = load_from_disk(source)
        if isinstance(data, DatasetDict):
            if split not in data:
                raise ValueError(f"env dataset {source!r} has no split {split!r}; splits found: {list(data)}")
            data = data[split]
        data = _with_rows(data, source)
        return data.to_iterable_dataset() if streaming else data
    if os.path.isfile(source):
        ext = os.path.splitext(source)[1].lower()
        if ext not in DATA_FILE_BUILDERS:
            raise ValueError(f"env dataset {source!r}: unknown file type {ext!r}; known: {sorted(DATA_FILE_BUILDERS)}")
        try:
            data = load_dataset(DATA_FILE_BUILDERS[ext], data_files={split: [source]}, split=split, streaming=streaming)
        except StopIteration:  # what `datasets` raises for a json/jsonl file without a single row
            raise _no_rows(source) from None
        except ValueError as e:  # a csv with a header only: "Instruction 'train' corresponds to no data!"
            if "corresponds to no data" in str(e):
                raise _no_rows(source) from None
            raise
        return _with_rows(data, source)
    try:
        data = load_dataset(source, config_name, split=split, streaming=streaming)
    except StopIteration:
        raise _no_rows(source) from None
    return _with_rows(data, source)


def _no_rows(source: str) -> ValueError:
    return ValueError(
        f"env dataset {source!r} has no rows (an empty data file?); each row is one env group, e.g. "
        f'{{"{ENV_FIELD}": "arithmetic", "a": 2, "b": 3}} on one line of a .jsonl file'
    )


def _with_rows(data, source: str):
    if isinstance(data, Dataset) and len(data) == 0:
        raise _no_rows(source)
    columns = getattr(data, "column_names", None)
    if columns and ENV_FIELD not in columns:
        import difflib

        close = difflib.get_close_matches(ENV_FIELD, columns, n=1, cutoff=0.6)
        hint = f"; rename {close[0]!r} to {ENV_FIELD!r}?" if close else ""
        raise ValueError(
            f"env dataset {source!r} has no {ENV_FIELD!r} column (the env kind of each row, e.g. "
            f'{{"{ENV_FIELD}": "arithmetic", "a": 2, "b": 3}}); columns found: {list(columns)}{hint}'
        )
    return data


def resolve_row_datasets(
    env_dataset: Any,
    eval_env_dataset: Any,
    *,
    model: Any,
    processing_class: Any,
    group_size: int,
    eval_group_size: int,
    groups_per_batch: int,
    owner: str,
):
    """For trainers: turn ``datasets`` of row specs into :class:`EnvRowDataset` s (anything else passes through).

    Returns ``(env_dataset, eval_env_dataset, processing_class)``; when rows are given without ``processing_class``,
    the tokenizer is loaded from ``model`` (a path or id, or a model's ``config._name_or_path``) and returned.
    """
    row_types = (Dataset, IterableDataset, DatasetDict, IterableDatasetDict)
    if not isinstance(env_dataset, row_types) and not isinstance(eval_env_dataset, row_types):
        return env_dataset, eval_env_dataset, processing_class
    if processing_class is None:
        from transformers import AutoTokenizer

        path = model if isinstance(model, str) else getattr(getattr(model, "config", None), "name_or_path", "")
        if not path:
            raise ValueError(f"{owner}: a dataset of env rows needs the tokenizer; pass processing_class")
        processing_class = AutoTokenizer.from_pretrained(path)
    renderer = Renderer(getattr(processing_class, "tokenizer", processing_class))

    def convert(data, size):
        if isinstance(data, row_types):
            return EnvRowDataset(data, renderer, size, groups_per_batch)
        return data

    return convert(env_dataset, group_size), convert(eval_env_dataset, eval_group_size), processing_class
