"""``DataCollatorForMaskedPreference``: TRL's preference collator that also honours per-token masks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import trl_seam


@dataclass
class DataCollatorForMaskedPreference(trl_seam.PreferenceCollator):
    """TRL's ``DataCollatorForPreference`` that also honours per-token ``chosen_mask`` / ``rejected_mask``.

    TRL builds ``completion_mask`` = 1 on every completion token; DPO's log-probabilities (and so its loss and its
    reward metrics) sum over exactly those tokens. Rows that carry ``chosen_mask`` / ``rejected_mask`` (1 = sampled by
    the model, 0 = written by the env) get ``completion_mask *= mask``, truncated like the ids, so env tokens stay in
    the context but out of the loss. Rows without masks are collated exactly as by TRL.
    """

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        output = super().torch_call(examples)
        if not any(
            f"{side}_mask" in ex and ex[f"{side}_mask"] is not None
            for ex in examples
            for side in ("chosen", "rejected")
        ):
            return output
        rows = []
        for side in ("chosen", "rejected"):
            for i, ex in enumerate(examples):
                ids, mask = ex[f"{side}_ids"], ex.get(f"{side}_mask")
                if mask is None:
                    mask = [1] * len(ids)
                if len(mask) != len(ids):
                    raise ValueError(
                        f"DataCollatorForMaskedPreference: example {i} has {len(ids)} {side}_ids but "
                        f"{len(mask)} {side}_mask values; the mask needs one value per token"
                    )
                rows.append([0] * len(ex["prompt_ids"]) + [int(m) for m in mask])
        if self.max_length is not None:
            sl = slice(None, self.max_length) if self.truncation_mode == "keep_start" else slice(-self.max_length, None)
            rows = [r[sl] for r in rows]
        token_mask = torch.zeros_like(output["completion_mask"])
        for i, r in enumerate(rows):
            token_mask[i, : len(r)] = torch.tensor(r, dtype=token_mask.dtype)
        output["completion_mask"] = output["completion_mask"] * token_mask
        return output


__all__ = ["DataCollatorForMaskedPreference"]
