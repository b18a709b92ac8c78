"""The off-policy correction of asynchronous GRPO (``max_staleness >= 1``): sampling logprobs (the sampler copy's)
vs the trained policy's, corrected by TRL's own importance-sampling path.

``EnvGRPOTrainer`` turns it on around TRL's scoring (:func:`sampler_correction`: TRL computes the ratio from its extra
scoring pass) or, with one optimizer pass per generation batch, around the loss (:func:`ratio_from_loss`: TRL keeps no
``old_per_token_logps``, they would equal the loss forward's own, so the ratio is taken from that forward). Modes
(``async_importance_sampling``): per token or per sequence, truncated or masked outside
``[vllm_importance_sampling_clip_min, vllm_importance_sampling_clip_max]``; see docs/async.md. Each batch logs
``async/importance_weight_mean`` and ``async/importance_weight_clip_fraction``.
"""

from __future__ import annotations

import contextlib
import math

import torch

from . import trl_seam


def correction_on(args, training: bool) -> bool:
    """Whether a batch is corrected: asynchronous rollouts with a correction mode, in training."""
    return bool(args.max_staleness) and args.async_importance_sampling != "none" and training


def ratio_in_loss(args) -> bool:
    """One optimizer pass per generation batch: the ratio comes from the loss forward (:func:`ratio_from_loss`)."""
    return args.gradient_accumulation_steps % (args.steps_per_generation * args.num_iterations) == 0


def sampler_correction(trainer) -> contextlib.AbstractContextManager:
    """TRL's importance-sampling correction of the sampler's logprobs, on for the block (scoring or the loss)."""
    args = trainer.args
    return trl_seam.sampler_importance_sampling(
        trainer,
        args.async_importance_sampling,
        args.vllm_importance_sampling_clip_min,
        args.vllm_importance_sampling_clip_max,
    )


def ratio_from_loss(trainer, inputs: dict) -> contextlib.AbstractContextManager:
    """The ratio of the batch ``inputs`` computed from the loss forward's logprobs (and recorded), for the block."""
    args = trainer.args
    if "sampling_per_token_logps" not in inputs:
        raise RuntimeError("EnvGRPOTrainer (max_staleness >= 1): the batch has no sampling logprobs to correct with")

    def make_ratio(policy_logps: torch.Tensor) -> torch.Tensor:
        mask = trained_mask(inputs)
        ratio = importance_ratio(
            policy_logps,
            inputs["sampling_per_token_logps"],
            mask,
            args.async_importance_sampling,
            args.vllm_importance_sampling_clip_min,
            args.vllm_importance_sampling_clip_max,
        )
        record_importance_weights(trainer, ratio, mask)
        return ratio

    return trl_seam.ratio_from_loss_logprobs(trainer, inputs, make_ratio)


def record_importance_weights(trainer, ratio: torch.Tensor, mask: torch.Tensor) -> None:
    """Log the mean importance weight of the trained tokens (or rows, in sequence modes) and the share clipped."""
    args = trainer.args
    if ratio.size(1) == 1:  # sequence modes: one ratio per row
        mask = (mask.sum(1, keepdim=True) > 0).to(mask.dtype)
    if args.async_importance_sampling.endswith("_mask"):
        clipped = ratio == 0
    elif args.vllm_importance_sampling_clip_max is not None:
        clipped = ratio >= args.vllm_importance_sampling_clip_max
    else:
        clipped = torch.zeros_like(ratio, dtype=torch.bool)
    n = float(mask.sum())
    trl_seam.record_mean_metrics(
        trainer,
        "train",
        {
            "async/importance_weight_mean": [float((ratio * mask).sum()) / n] if n else [],
            "async/importance_weight_clip_fraction": [float((clipped * mask).sum()) / n] if n else [],
        },
    )


def trained_mask(batch: dict) -> torch.Tensor:
    """The tokens a batch trains on: its completion mask, without env tokens (``tool_mask``) where it has them."""
    mask = batch["completion_mask"]
    return mask * batch["tool_mask"] if "tool_mask" in batch else mask


def importance_ratio(
    policy_logps: torch.Tensor,
    sampling_logps: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None,
    clip_max: float | None,
) -> torch.Tensor:
    """TRL's importance-sampling ratio of the policy vs the sampler (``GRPOTrainer._generate_and_score_completions``
    with ``vllm_importance_sampling_correction``): ``exp(policy - sampling)`` on trained tokens (1 elsewhere and where
    a sampling logprob is NaN), per token or summed per sequence (``mode`` ``token_*`` / ``sequence_*``), truncated
    to ``[clip_min, clip_max]`` (``*_truncate``) or zeroed outside it (``*_mask``). Shape (B, T) or (B, 1)."""
    diff = torch.nan_to_num((policy_logps - sampling_logps) * mask, nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("_truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = clip_min if clip_min is not None else -math.inf
    high = clip_max if clip_max is not None else math.inf
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


__all__ = [
    "correction_on",
    "importance_ratio",
    "ratio_from_loss",
    "ratio_in_loss",
    "record_importance_weights",
    "sampler_correction",
    "trained_mask",
]
