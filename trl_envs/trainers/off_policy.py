"""The off-policy correction of asynchronous GRPO (``max_staleness >= 1``): the batch was sampled by an older copy
of the policy, so each trained token's advantage is weighted by the importance ratio ``exp(policy - sampling)`` of the
policy at training time over the sampler copy's logprobs.

TRL's own loss does the same for vLLM (``vllm_importance_sampling_correction``): it multiplies the per-token policy loss
by that ratio. Every GRPO loss is linear in the advantage with a non-negative weight, so weighting the advantage
instead gives the same policy loss through TRL's batch format (TRL's loss takes per-token ``(B, T)`` advantages),
without TRL's private vLLM flags; the KL term (``beta``) is not weighted, as in TRL. The policy's logprobs:

* with one optimizer pass per generation batch (:func:`ratio_in_loss`, the default), those of the loss's own forward
  pass (:func:`ratio_from_loss`, around the trainer's public ``compute_loss``): TRL keeps no scoring-time logprobs
  then, and they would equal the loss forward's, so the correction costs no extra forward pass;
* with several passes, the ones TRL's scoring keeps (``old_per_token_logps``; :func:`correct_advantages` on the scored
  batch).

With ``use_vllm`` and TRL's own correction on, TRL corrects and this module stays out. Modes
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
    """Whether a batch is corrected here: asynchronous rollouts with a correction mode, in training, unless TRL's own
    vLLM correction already applies the same ratio."""
    trl_corrects = args.use_vllm and args.vllm_importance_sampling_correction
    return bool(args.max_staleness) and args.async_importance_sampling != "none" and training and not trl_corrects


def ratio_in_loss(args) -> bool:
    """One optimizer pass per generation batch: the ratio comes from the loss forward (:func:`ratio_from_loss`)."""
    return args.gradient_accumulation_steps % (args.steps_per_generation * args.num_iterations) == 0


def correct_advantages(trainer, batch: dict) -> None:
    """Weight the advantages of ``batch`` (TRL's scored batch, changed in place) by the importance ratio of the
    policy (TRL's scoring-time logprobs, else one forward pass) over the sampler copy, and record the weights."""
    policy = batch.get("old_per_token_logps")
    if policy is None:
        policy = policy_logprobs(trainer, batch, trainer.args.per_device_train_batch_size)
    _weigh_advantages(trainer, batch, policy)


def ratio_from_loss(trainer, inputs: dict) -> contextlib.AbstractContextManager:
    """For the block (one call of the trainer's ``compute_loss`` on the micro-batch ``inputs``): weight
    ``inputs['advantages']`` by the importance ratio computed from the logprobs of the loss's own policy forward pass
    (detached), before the loss reads them."""
    return trl_seam.on_loss_policy_logprobs(trainer, lambda logps: _weigh_advantages(trainer, inputs, logps.detach()))


def _weigh_advantages(trainer, batch: dict, policy: torch.Tensor) -> None:
    args = trainer.args
    if "sampling_per_token_logps" not in batch:
        raise RuntimeError("EnvGRPOTrainer (max_staleness >= 1): the batch has no sampling logprobs to correct with")
    mask = trained_mask(batch)
    ratio = importance_ratio(
        policy,
        batch["sampling_per_token_logps"],
        mask,
        args.async_importance_sampling,
        args.vllm_importance_sampling_clip_min,
        args.vllm_importance_sampling_clip_max,
    )
    record_importance_weights(trainer, ratio, mask)
    advantages = batch["advantages"]
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    batch["advantages"] = advantages * ratio.to(advantages.dtype)


def policy_logprobs(trainer, batch: dict, batch_size: int | None = None) -> torch.Tensor:
    """The trainer's policy's per-token log-probabilities (B, T) of the completions of a scored ``batch``, at the
    sampling temperature, as TRL's loss computes them, without gradient (in chunks of ``batch_size`` rows)."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    width = batch["completion_ids"].size(1)
    batch_size = batch_size or ids.size(0)
    chunks = []
    with torch.no_grad(), trainer.accelerator.autocast():
        for start in range(0, ids.size(0), batch_size):
            rows = slice(start, start + batch_size)
            logits = trainer.model(input_ids=ids[rows], attention_mask=mask[rows], logits_to_keep=width + 1).logits
            logits = logits[:, :-1, :].float() / trainer.args.temperature
            targets = batch["completion_ids"][rows].unsqueeze(-1)
            chunks.append(torch.log_softmax(logits, dim=-1).gather(-1, targets).squeeze(-1))
    return torch.cat(chunks, 0)


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
    "correct_advantages",
    "correction_on",
    "importance_ratio",
    "policy_logprobs",
    "ratio_from_loss",
    "ratio_in_loss",
    "record_importance_weights",
    "trained_mask",
]
