"""Checks of a preference dataset before DPO trains on it, each failing with one error that names the row and column.

Two formats (those :class:`~trl_envs.trainers.dpo.EnvDPOTrainer` takes):

* raw: ``prompt`` / ``chosen`` / ``rejected`` as text or chat messages (or ``chosen`` / ``rejected`` that both start
  with the prompt), tokenized by TRL afterwards — :func:`check_raw_preferences`;
* pre-tokenized: ``prompt_ids`` / ``chosen_ids`` / ``rejected_ids`` with optional per-token ``chosen_mask`` /
  ``rejected_mask`` (1 = trained, 0 = context only), e.g. pairs from
  :func:`~trl_envs.training_data.preference.make_preference_pairs` — :func:`check_tokenized_pairs`.

A streamed ``IterableDataset`` is checked lazily, as its rows are read.
"""

from __future__ import annotations

import warnings
from typing import Any

from datasets import Dataset

TOKENIZED_COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids")
MASK_COLUMNS = ("chosen_mask", "rejected_mask")
OWNER = "EnvDPOTrainer"


def first_row(dataset, name: str) -> dict[str, Any]:
    """The first row of ``dataset``; ``ValueError`` for an empty one."""
    first = next(iter(dataset), None)
    if first is None:
        raise ValueError(f"{OWNER}: the {name} dataset is empty")
    return first


def is_tokenized(row: dict[str, Any]) -> bool:
    """Whether a row is in the pre-tokenized format (it has every one of :data:`TOKENIZED_COLUMNS`)."""
    return all(c in row for c in TOKENIZED_COLUMNS)


def check_raw_preferences(dataset, name: str, tokenizer):
    """``dataset`` checked (``chosen`` / ``rejected`` columns, chat data only with a chat template, no empty answer),
    without the rows whose chosen and rejected answers are equal (see :func:`drop_identical_pairs`)."""
    from trl.data_utils import is_conversational

    first = first_row(dataset, name)
    _check_columns(dataset, first, name)
    if is_conversational(first) and not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{OWNER}: the {name} dataset is conversational (its columns hold chat messages) but the "
            f"tokenizer {tokenizer.name_or_path!r} has no chat template to render them. Use a chat/instruct "
            "model, set tokenizer.chat_template, or give prompt/chosen/rejected as plain text."
        )
    dataset = _check_not_empty(dataset, name)
    return drop_identical_pairs(dataset, name, ("chosen", "rejected"))


def check_tokenized_pairs(dataset, name: str, *, max_length: int | None = None, truncation_mode: str = "keep_start"):
    """``dataset`` checked (no empty ``chosen_ids`` / ``rejected_ids``, one mask value per token), without identical
    pairs and, as TRL does with ``truncation_mode="keep_start"``, without the rows whose prompt alone fills
    ``max_length`` (nothing of their completions would be trained)."""
    if isinstance(dataset, Dataset):
        for column in ("chosen_ids", "rejected_ids"):
            for i, ids in enumerate(dataset[column]):
                if not ids:
                    raise _empty_error(name, i, column)
        for side in ("chosen", "rejected"):
            if f"{side}_mask" in dataset.column_names:
                for i, (ids, mask) in enumerate(zip(dataset[f"{side}_ids"], dataset[f"{side}_mask"])):
                    if mask is not None and len(mask) != len(ids):
                        raise mask_length_error(f"row {i} of the {name} dataset", side, len(ids), len(mask))
    dataset = drop_identical_pairs(dataset, name, ("chosen_ids", "rejected_ids"))
    if max_length is not None and truncation_mode == "keep_start":
        if not (isinstance(dataset, Dataset) and all(len(p) < max_length for p in dataset["prompt_ids"])):
            dataset = dataset.filter(lambda ex: len(ex["prompt_ids"]) < max_length)
    return dataset


def mask_length_error(where: str, side: str, num_ids: int, num_mask: int) -> ValueError:
    return ValueError(
        f"{OWNER}: {where} has {num_ids} {side}_ids but {num_mask} {side}_mask values; the mask needs one value per "
        "token"
    )


def drop_identical_pairs(dataset, name: str, columns: tuple[str, str]):
    """``dataset`` without the rows whose chosen and rejected answers are the same (DPO learns nothing from them: the
    loss stays at log 2), with a warning that counts them; a dataset of nothing else is an error. Streamed datasets
    drop them as they are read."""
    chosen, rejected = columns
    if not isinstance(dataset, Dataset):
        return dataset.filter(lambda ex: ex[chosen] != ex[rejected])
    same = [i for i, (c, r) in enumerate(zip(dataset[chosen], dataset[rejected])) if c == r]
    if not same:
        return dataset
    if len(same) == len(dataset):
        raise ValueError(
            f"{OWNER}: in every one of the {len(dataset)} rows of the {name} dataset {chosen!r} "
            f"equals {rejected!r}; DPO needs pairs whose answers differ"
        )
    warnings.warn(
        f"{OWNER}: dropped {len(same)} of {len(dataset)} rows of the {name} dataset whose {chosen!r} "
        f"equals {rejected!r} (first: row {same[0]}); DPO learns nothing from them",
        stacklevel=3,
    )
    keep = set(same)
    return dataset.select([i for i in range(len(dataset)) if i not in keep])


def _check_columns(dataset, first: dict[str, Any], name: str) -> None:
    names = getattr(dataset, "column_names", None)
    found = list(names) if names else list(first.keys())
    missing = [c for c in ("chosen", "rejected") if c not in found]
    if missing:
        raise ValueError(
            f"{OWNER}: the {name} preference dataset has no {' and no '.join(repr(c) for c in missing)} column. "
            "A preference dataset needs 'prompt', 'chosen' and 'rejected' (text or chat messages), or 'chosen' and "
            "'rejected' that both start with the prompt (TRL's implicit-prompt format), or pre-tokenized "
            f"{list(TOKENIZED_COLUMNS)}. Columns found: {found}. Rename columns with dataset.rename_column(old, new)."
        )


def _is_empty(value: Any) -> bool:
    """Whether an answer (text, one chat message, a list of messages, or a message's content parts) holds nothing."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, list):  # messages, or content parts; [] is empty
        return all(_is_empty(v) for v in value)
    if isinstance(value, dict):
        if value.get("tool_calls"):
            return False
        if "content" in value:
            return _is_empty(value["content"])
        if value.get("type", "text") == "text":
            return _is_empty(value.get("text"))
        return False  # an image or another non-text part
    return False


def _empty_error(name: str, index: int | str, column: str) -> ValueError:
    return ValueError(
        f"{OWNER}: row {index} of the {name} dataset has an empty {column!r} answer; DPO needs a "
        "non-empty chosen and rejected completion in every row (filter such rows out first, e.g. "
        "dataset.filter(...))."
    )


def _check_not_empty(dataset, name: str):
    if isinstance(dataset, Dataset):
        for column in ("chosen", "rejected"):
            for i, value in enumerate(dataset[column]):
                if _is_empty(value):
                    raise _empty_error(name, i, column)
        return dataset

    def check(example):
        for column in ("chosen", "rejected"):
            if _is_empty(example[column]):
                raise _empty_error(name, "(streamed)", column)
        return example

    return dataset.map(check)


__all__ = [
    "MASK_COLUMNS",
    "TOKENIZED_COLUMNS",
    "check_raw_preferences",
    "check_tokenized_pairs",
    "drop_identical_pairs",
    "first_row",
    "is_tokenized",
]
