"""``DataCollatorForMaskedPreference``: the batches ``DPOTrainer`` trains on, with per-token masks honoured."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

TRUNCATION_MODES = ("keep_start", "keep_end")


@dataclass
class DataCollatorForMaskedPreference:
    """Pads pre-tokenized preference rows into the batch ``DPOTrainer``'s loss takes, as TRL's
    ``DataCollatorForPreference`` does, and honours per-token ``chosen_mask`` / ``rejected_mask``.

    Each row (``prompt_ids``, ``chosen_ids``, ``rejected_ids``, optional masks and ``ref_chosen_logps`` /
    ``ref_rejected_logps``; other columns are ignored) becomes two sequences, prompt + chosen and prompt + rejected:
    the batch is ``input_ids`` (the chosen sequences, then the rejected ones, right-padded with ``pad_token_id``),
    ``attention_mask`` and ``completion_mask`` (1 on the completion tokens: DPO's log-probabilities, and so its loss
    and its reward metrics, sum over exactly those), plus the reference log-probabilities when the rows carry them.
    A row with ``chosen_mask`` / ``rejected_mask`` (1 = sampled by the model, 0 = written by the env) has its
    completion mask multiplied by it, so env tokens stay in the context but out of the loss. Sequences longer than
    ``max_length`` are cut (``truncation_mode``: keep the start or the end), masks with them.
    """

    pad_token_id: int
    max_length: int | None = None
    truncation_mode: str = "keep_start"
    pad_to_multiple_of: int | None = None

    def __post_init__(self) -> None:
        if self.truncation_mode not in TRUNCATION_MODES:
            raise ValueError(
                f"DataCollatorForMaskedPreference: truncation_mode must be one of {list(TRUNCATION_MODES)}, got "
                f"{self.truncation_mode!r}"
            )

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        sequences, completion_masks = [], []
        for side in ("chosen", "rejected"):
            for i, ex in enumerate(examples):
                prompt, ids, mask = ex["prompt_ids"], ex[f"{side}_ids"], ex.get(f"{side}_mask")
                if mask is None:
                    mask = [1] * len(ids)
                elif len(mask) != len(ids):
                    raise ValueError(
                        f"DataCollatorForMaskedPreference: example {i} has {len(ids)} {side}_ids but "
                        f"{len(mask)} {side}_mask values; the mask needs one value per token"
                    )
                sequences.append(list(prompt) + list(ids))
                completion_masks.append([0] * len(prompt) + [int(m) for m in mask])
        if self.max_length is not None:
            cut = (
                slice(None, self.max_length) if self.truncation_mode == "keep_start" else slice(-self.max_length, None)
            )
            sequences, completion_masks = [s[cut] for s in sequences], [m[cut] for m in completion_masks]
        output = {
            "input_ids": _padded(sequences, self.pad_token_id, self.pad_to_multiple_of),
            "attention_mask": _padded([[1] * len(s) for s in sequences], 0, self.pad_to_multiple_of),
            "completion_mask": _padded(completion_masks, 0, self.pad_to_multiple_of),
        }
        for key in ("ref_chosen_logps", "ref_rejected_logps"):
            if key in examples[0]:
                output[key] = torch.tensor([ex[key] for ex in examples])
        return output


def _padded(rows: list[list[int]], value: int, multiple: int | None) -> torch.Tensor:
    """``rows`` right-padded with ``value`` to the longest (rounded up to a multiple of ``multiple``)."""
    width = max(len(r) for r in rows)
    if multiple:
        width = -(-width // multiple) * multiple
    return torch.tensor([list(r) + [value] * (width - len(r)) for r in rows], dtype=torch.long)


__all__ = ["DataCollatorForMaskedPreference"]
