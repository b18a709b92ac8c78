"""Checks of a preference dataset before DPO trains on it, each failing with one error that names the row and column.

Two formats (those :class:`~trl_envs.trainers.dpo.EnvDPOTrainer` takes):

* raw: ``prompt`` / ``chosen`` / ``rejected`` as text or chat messages, tokenized by TRL afterwards —
  :func:`check_raw_preferences`. Without a ``prompt`` column, one of :data:`PROMPT_ALIASES` (``question``,
  ``instruction``, ``input``) is used as the prompt, with a warning that says so; without any, ``chosen`` and
  ``rejected`` must be conversations that begin with the same prompt messages (TRL's implicit prompt), and a row
  whose two conversations share no message is named. Text ``chosen`` / ``rejected`` without a prompt are refused:
  TRL would take their common leading characters as the prompt (``''`` or ``'1'`` for answers such as ``'12'`` /
  ``'13'``);
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
PROMPT_ALIASES = ("question", "instruction", "input")
"""Columns used as the prompt when a preference dataset has no ``prompt`` column (as TRL users name them)."""
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
    dataset = resolve_prompt(dataset, first, name)
    first = first_row(dataset, name)
    if is_conversational(first) and not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{OWNER}: the {name} dataset is conversational (its columns hold chat messages) but the "
            f"tokenizer {tokenizer.name_or_path!r} has no chat template to render them. Use a chat/instruct "
            "model, set tokenizer.chat_template, or give prompt/chosen/rejected as plain text."
        )
    dataset = _check_not_empty(dataset, name)
    return drop_identical_pairs(dataset, name, ("chosen", "rejected"))


def _columns(dataset, first: dict[str, Any]) -> list[str]:
    names = getattr(dataset, "column_names", None)
    return list(names) if names else list(first.keys())


def _is_conversation(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def resolve_prompt(dataset, first: dict[str, Any], name: str):
    """``dataset`` with its prompt settled: a ``prompt`` column as is; else the one column of :data:`PROMPT_ALIASES`
    renamed to ``prompt`` (a warning says so); else implicit prompts, only where ``chosen`` and ``rejected`` are
    conversations that begin with the same messages (every row checked; the rows that share none are named).

    Raises:
        ValueError: several alias columns, text ``chosen`` / ``rejected`` without a prompt column, or rows whose
            implicit prompt would be empty; the message names the columns found or the rows.
    """
    found = _columns(dataset, first)
    if "prompt" in found:
        return dataset
    aliases = [c for c in PROMPT_ALIASES if c in found]
    if len(aliases) > 1:
        raise ValueError(
            f"{OWNER}: the {name} preference dataset has no 'prompt' column and several that could be it: "
            f"{aliases}; rename the prompt one with dataset.rename_column(old, 'prompt'). Columns found: {found}"
        )
    if aliases:
        warnings.warn(
            f"{OWNER}: the {name} preference dataset has no 'prompt' column; its {aliases[0]!r} column is used as "
            "the prompt",
            stacklevel=3,
        )
        return dataset.rename_column(aliases[0], "prompt")
    if not (_is_conversation(first["chosen"]) and _is_conversation(first["rejected"])):
        raise ValueError(
            f"{OWNER}: the {name} preference dataset has no 'prompt' column (nor {' / '.join(PROMPT_ALIASES)}); "
            "without one TRL would take the common start of the 'chosen' and 'rejected' texts as the prompt. "
            "Rename the prompt column to 'prompt' (dataset.rename_column(old, 'prompt')), or give chosen and "
            f"rejected as conversations that begin with the same prompt messages. Columns found: {found}"
        )
    if isinstance(dataset, Dataset):
        empty = [
            i for i, (c, r) in enumerate(zip(dataset["chosen"], dataset["rejected"])) if _shared_messages(c, r) == 0
        ]
        if empty:
            raise _empty_prompt_error(name, empty, len(dataset))
        return dataset

    def check(example, index):
        if _shared_messages(example["chosen"], example["rejected"]) == 0:
            raise _empty_prompt_error(name, [index], None)
        return example

    return dataset.map(check, with_indices=True)


def _shared_messages(chosen: Any, rejected: Any) -> int:
    """How many leading messages two conversations share (their implicit prompt); 0 for anything else."""
    if not (_is_conversation(chosen) and _is_conversation(rejected)):
        return 0
    n = 0
    for c, r in zip(chosen[:-1], rejected[:-1]):  # the last message of each is its answer, never prompt
        if c != r:
            break
        n += 1
    return n


def _empty_prompt_error(name: str, rows: list[int], total: int | None) -> ValueError:
    shown = ", ".join(map(str, rows[:10])) + (", ..." if len(rows) > 10 else "")
    count = f" ({len(rows)} of {total})" if total is not None else ""
    return ValueError(
        f"{OWNER}: the {name} preference dataset has no 'prompt' column and in rows {shown}{count} 'chosen' and "
        "'rejected' begin with no common message, so their implicit prompt is empty; give a 'prompt' column or "
        "begin both conversations with the prompt messages"
    )


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
    found = _columns(dataset, first)
    missing = [c for c in ("chosen", "rejected") if c not in found]
    if missing:
        raise ValueError(
            f"{OWNER}: the {name} preference dataset has no {' and no '.join(repr(c) for c in missing)} column. "
            "A preference dataset needs 'prompt', 'chosen' and 'rejected' (text or chat messages), or 'chosen' and "
            "'rejected' conversations that begin with the prompt messages (TRL's implicit prompt), or pre-tokenized "
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
    "PROMPT_ALIASES",
    "TOKENIZED_COLUMNS",
    "check_raw_preferences",
    "check_tokenized_pairs",
    "drop_identical_pairs",
    "first_row",
    "is_tokenized",
    "resolve_prompt",
]
