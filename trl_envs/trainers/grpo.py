"""``EnvGRPOTrainer``: TRL's ``GRPOTrainer`` with generation and rewards driven by environments.

How an env batch maps onto TRL (see docs/DESIGN.md):

* The trainer's dataset is a list of *group keys*, one per env group of the :class:`~trl_envs.core.types.RLDataset`.
  TRL's sampler repeats each key ``num_generations`` times in a row, so one block of G rows is one group.
* ``_generate_and_score_completions`` makes the groups' envs of this rank's rows, rolls them all out together (one
  batched ``generate`` per turn) and lays the trajectories out as rows (``row_layout``): one row per trajectory
  (prompt = first observation, completion = actions + env tokens, ``env_mask`` = 1 exactly on sampled tokens,
  sampling logprobs), or one row per turn for envs whose observations do not extend each other, in blocks of G
  rows per group. TRL's ``rollout_func`` hook hands those rows to TRL.
* The reward TRL sees is the trajectory's total (step rewards + group reward), passed through its reward hook, so
  ``scale_rewards``, every ``loss_type``, ``beta``, PEFT, ``num_iterations`` and evaluation work as in TRL.
* ``credit_assignment="per_turn"`` replaces TRL's advantages by per-token ones from per-turn rewards-to-go
  (``credit``; docs/credit_assignment.md).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from datasets import Dataset
from trl import GRPOTrainer

from ..core.renderer import Renderer
from ..core.types import EnvContractError, EnvGroupBuilder, RLDataset, RLDatasetBuilder
from ..rollout.engine import RolloutBatchResult, run_sync
from ..rollout.metrics import rollout_metrics
from ..samplers.base import Sampler
from ..training_data.credit import first_turn_returns, row_token_advantages
from ..training_data.row_layout import RowPlan, plan_rows
from . import trl_seam
from .async_rollouts import AsyncRolloutsMixin
from .base import EnvTrainerMixin, frozen_reference, load_env_datasets
from .checkpoints import hold_output_dir
from .group_index import GroupIndex
from .grpo_config import EnvGRPOConfig
from .health import TrainingHealthCallback, check_finite_rewards

ENV_REWARD_KEY = "env_reward"


def env_reward(completions, env_reward: list[float | None], **kwargs) -> list[float | None]:
    """TRL reward function: the env's total reward of each trajectory (``None`` for rows of skipped groups)."""
    return list(env_reward)


env_reward.__name__ = "env"


class EnvGRPOTrainer(EnvTrainerMixin, AsyncRolloutsMixin, GRPOTrainer):
    """GRPO on environments. Takes env datasets instead of a prompt dataset; everything else is ``GRPOTrainer``.

    Args:
        model: model id, path, or ``PreTrainedModel``. With ``beta > 0`` the reference model is the model as passed:
            loaded from the id/path, a frozen copy of a model object (also one changed in memory since it was
            loaded), or the model with its adapter switched off under PEFT.
        args: :class:`~trl_envs.trainers.grpo_config.EnvGRPOConfig`.
        env_dataset: the training envs: an :class:`RLDataset`, an :class:`RLDatasetBuilder` (whose test split
            becomes the evaluation envs unless ``eval_env_dataset`` is given), or a ``datasets.Dataset`` /
            ``IterableDataset`` of env row specs (one group of ``num_generations`` envs per row, see
            :class:`~trl_envs.registry.env_datasets.EnvRowDataset`).
        eval_env_dataset: evaluation envs (optional; an ``RLDataset`` or a dataset of row specs); evaluation logs
            ``eval_env/...``.
        processing_class: the tokenizer (must have a chat template; it must be the tokenizer the envs' renderer
            uses).
        peft_config: a PEFT config to train an adapter (then ``beta > 0`` uses the adapter-free model as reference).
        sampler: optional :class:`~trl_envs.samplers.base.Sampler` to generate with instead of the policy itself.
        callbacks, optimizers: as in ``transformers.Trainer``.

    Attributes:
        last_rollout: the :class:`RolloutBatchResult` of the latest rollout on this rank (for inspection).

    Raises:
        ValueError: at construction, for a group size other than ``num_generations``, a per-rank generation batch
            that is not a multiple of the group size (groups would straddle ranks), or a tokenizer without chat
            template.
    """

    def __init__(
        self,
        model,
        args: EnvGRPOConfig,
        env_dataset: RLDataset | RLDatasetBuilder | Dataset,
        eval_env_dataset: RLDataset | Dataset | None = None,
        processing_class=None,
        peft_config=None,
        sampler: Sampler | None = None,
        callbacks=None,
        optimizers=(None, None),
    ):
        if not isinstance(args, EnvGRPOConfig):
            raise TypeError(f"EnvGRPOTrainer: args must be an EnvGRPOConfig, got {type(args).__name__}")
        train_envs, eval_envs, processing_class = load_env_datasets(
            env_dataset,
            eval_env_dataset,
            owner="EnvGRPOTrainer",
            model=model,
            processing_class=processing_class,
            group_size=args.num_generations,
            eval_group_size=args.num_generations_eval or args.num_generations,
            groups_per_batch=max(args.generation_batch_size // args.num_generations, 1),
            seed=args.seed,
        )
        _check_batch_geometry(args, eval_envs is not None)
        _warn_biased_logprob_comparison(args)
        self._train_index = GroupIndex("train", train_envs)
        self._eval_index = GroupIndex("eval", eval_envs) if eval_envs is not None else None
        _check_group_size(self._train_index, args.num_generations, "num_generations")
        if self._eval_index is not None:
            _check_group_size(
                self._eval_index, args.num_generations_eval or args.num_generations, "num_generations_eval"
            )
        self._init_env_trainer(sampler)
        self._planned_rows: RowPlan | None = None
        reference = frozen_reference(model, peft_config, needed=args.beta != 0.0)
        with (
            trl_seam.rollout_func_warning_silenced(),
            trl_seam.grpo_reference_model(reference) if reference is not None else contextlib.nullcontext(),
        ):
            super().__init__(
                model=model,
                reward_funcs=[env_reward],
                args=args,
                train_dataset=self._train_index.as_dataset(),
                eval_dataset=self._eval_index.as_dataset() if self._eval_index is not None else None,
                processing_class=processing_class,
                callbacks=callbacks,
                optimizers=optimizers,
                peft_config=peft_config,
                rollout_func=_env_rollout_func,
            )
        self._check_env_launch("EnvGRPOTrainer")
        self.eos_token_ids = with_turn_stops(self.eos_token_ids, Renderer(trl_seam.tokenizer_of(self)))
        env_label = type(self._train_index.builder(self._train_index.key(0))).__name__
        self._mark_checkpoints(model, env_label)
        self.add_callback(TrainingHealthCallback(args.health_patience, args.health_min_entropy, envs=env_label))

        if args.rollout_traces:
            from .trace_callback import RolloutTraceCallback

            self.add_callback(RolloutTraceCallback(self, args.rollout_traces))

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs):
        """``GRPOTrainer.train`` holding ``output_dir``'s lock; ``resume_from_checkpoint`` (a folder, or ``True`` /
        ``"last"`` for the newest complete one) is checked first (see :mod:`~trl_envs.trainers.checkpoints`)."""
        checkpoint = self._checked_checkpoint(resume_from_checkpoint)
        with hold_output_dir(self.args.output_dir):
            return super().train(
                resume_from_checkpoint=checkpoint, trial=trial, ignore_keys_for_eval=ignore_keys_for_eval, **kwargs
            )

    # -- rollouts and the rows TRL trains on ------------------------------------------------------------------

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """Roll out the env groups of ``inputs``, lay their trajectories out as rows (see ``row_layout``), then let
        TRL score and prepare them; with ``credit_assignment="per_turn"`` replace its advantages by per-token ones."""
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        keys = _group_keys([x["prompt"] for x in inputs], group_size)
        builders = [self._builder(k) for k in keys]
        if self.args.max_staleness and mode == "train":  # async: rolled out ahead by the pipeline (async_rollouts.py)
            result = self._async_rollout(keys, builders)
        else:
            result = self._rollout(builders)
        names = [f"{type(b).__name__} (row {k})" for k, b in zip(keys, builders)]
        check_finite_rewards(result.groups, names, self.state.global_step + (mode == "train"), self.accelerator)
        for name, builder, group in zip(names, builders, result.groups):
            if group is not None and len(group.trajectories) != group_size:
                raise EnvContractError(
                    f"{name} made {len(group.trajectories)} envs; the trainer's group size "
                    f"(num_generations) is {group_size}"
                )
        plan = plan_rows(result.groups, group_size, self.args.training_rows, names)
        self._pad_to_common_shape(plan, mode)
        metrics = rollout_metrics(result.groups, result.error_counts)
        if plan.num_trajectories:
            metrics["rows/per_turn_fraction"] = [plan.num_per_turn_trajectories / plan.num_trajectories]
        metrics["rows/filler_fraction"] = [plan.num_fillers / len(plan.rows)]
        trl_seam.record_mean_metrics(self, mode, metrics)  # one gather for all env metrics of the step
        self._planned_rows = plan
        try:
            output = super()._generate_and_score_completions([dict(inputs[i]) for i in plan.source_rows()])
        finally:
            self._planned_rows = None
        if self.args.credit_assignment == "per_turn":
            output["advantages"] = self._per_turn_advantages(plan, result.groups, output["completion_ids"].size(1))
        return output

    def _rollout(self, builders: Sequence[EnvGroupBuilder]) -> RolloutBatchResult:
        # vLLM server mode and tensor-parallel colocate need equally many prompts per call on every rank.
        equal_batches = self.use_vllm and (self.args.vllm_mode == "server" or self.args.vllm_tensor_parallel_size > 1)
        result = self._rollout_groups(builders, equal_batch_sizes=equal_batches)
        self.last_rollout = result
        return result

    def _pad_to_common_shape(self, plan: RowPlan, mode: str) -> None:
        """Pad with unscorable blocks so every rank has as many rows (TRL gathers rewards across ranks) and, in
        training, a multiple of ``steps_per_generation`` (TRL splits the batch into that many equal parts)."""
        blocks = plan.num_blocks
        if self.accelerator.num_processes > 1:
            blocks = int(self.accelerator.gather(torch.tensor([blocks], device=self.accelerator.device)).max())
        if mode == "train":
            while (blocks * plan.group_size) % self.args.steps_per_generation:
                blocks += 1
        plan.pad_to(blocks)

    def _rollout_output(self, prompts: list[str]) -> dict[str, Any]:
        plan = self._planned_rows
        if plan is None or len(plan.rows) != len(prompts):
            raise RuntimeError(
                f"EnvGRPOTrainer: TRL asked for {len(prompts)} completions but "
                f"{0 if plan is None else len(plan.rows)} rows were planned; rollout_func must only be "
                "called from EnvGRPOTrainer._generate_and_score_completions"
            )
        out = plan.rollout_output(trl_seam.tokenizer_of(self).pad_token_id, self.eos_token_ids[0])
        out[ENV_REWARD_KEY] = out.pop("rewards")
        return out

    def _per_turn_advantages(self, plan: RowPlan, groups, width: int) -> torch.Tensor:
        scale = (
            self.scale_rewards
            if self.scale_rewards in ("group", "batch", "none")
            else ("group" if self.scale_rewards else "none")
        )
        batch_std = None
        if scale == "batch":
            returns = torch.tensor(first_turn_returns(groups, self.args.credit_gamma), dtype=torch.float64)
            stats = torch.stack(
                [returns.sum(), (returns**2).sum(), torch.tensor(float(len(returns)), dtype=torch.float64)]
            )
            total, total_sq, n = self.accelerator.gather(stats.to(self.accelerator.device)).view(-1, 3).sum(0).tolist()
            batch_std = ((total_sq - total * total / n) / (n - 1)) ** 0.5 if n > 1 else 0.0
        advantages = row_token_advantages(plan, groups, width, self.args.credit_gamma, scale, batch_std)
        return advantages.to(self.accelerator.device)

    def _builder(self, key: str) -> EnvGroupBuilder:
        index = self._train_index if key.startswith("train/") else self._eval_index
        if index is None:
            raise KeyError(f"EnvGRPOTrainer: no env dataset for row key {key!r}")
        return index.builder(key)

    def sampling_settings(self) -> dict[str, Any]:
        return {
            **super().sampling_settings(),
            "generation_kwargs": self.args.generation_kwargs,
            "cache_implementation": self.args.cache_implementation,
        }


def with_turn_stops(eos_token_ids: Sequence[int], renderer: Renderer) -> list[int]:
    """TRL's ``eos_token_ids`` plus the chat template's stop tokens.

    TRL counts a row as truncated when its last token is not in ``eos_token_ids`` (+ pad), and with
    ``mask_truncated_completions`` trains nothing of it. TRL takes those ids from the tokenizer's and generation
    config's EOS only, so for a base ChatML model (EOS ``<|endoftext|>``, end of turn ``<|im_end|>``) every finished
    answer would count as truncated. The tokenizer's EOS stays first (it pads the filler rows).
    """
    ids = list(eos_token_ids)
    return ids + [t for t in renderer.get_stop_sequences() if t not in ids]


def _env_rollout_func(prompts: list[str], trainer: EnvGRPOTrainer) -> dict[str, Any]:
    """TRL's ``rollout_func`` hook (called as ``rollout_func(prompts, trainer)``): the rows planned for this batch."""
    return trainer._rollout_output(prompts)


def _group_keys(prompts: list[str], group_size: int) -> list[str]:
    if len(prompts) % group_size:
        raise ValueError(
            f"EnvGRPOTrainer: this rank got {len(prompts)} rows, not a multiple of the group size "
            f"{group_size}; a group would straddle ranks"
        )
    keys = prompts[::group_size]
    for g, key in enumerate(keys):
        block = prompts[g * group_size : (g + 1) * group_size]
        if any(p != key for p in block):
            raise ValueError(
                f"EnvGRPOTrainer: rows {g * group_size}..{(g + 1) * group_size - 1} mix env groups "
                f"{sorted(set(block))}; TRL must repeat each group key num_generations times in a row"
            )
    return keys


def _check_batch_geometry(args: EnvGRPOConfig, has_eval: bool) -> None:
    per_rank = args.generation_batch_size // max(args.world_size, 1)
    if per_rank % args.num_generations:
        raise ValueError(
            f"EnvGRPOConfig: the per-rank generation batch (generation_batch_size={args.generation_batch_size} over "
            f"{args.world_size} processes = {per_rank} rows) is not a multiple of "
            f"num_generations={args.num_generations}, so env groups would straddle ranks and their group rewards "
            "could not be computed. Make it a multiple of num_generations."
        )
    g_eval = args.num_generations_eval or args.num_generations
    if has_eval and args.per_device_eval_batch_size % g_eval:
        raise ValueError(
            f"EnvGRPOConfig: per_device_eval_batch_size={args.per_device_eval_batch_size} is not a "
            f"multiple of the evaluation group size {g_eval}."
        )


def _warn_biased_logprob_comparison(args: EnvGRPOConfig) -> None:
    """Sampling logprobs are recorded from the model's logits, as TRL's training logprobs are; a repetition penalty
    samples from another distribution, so comparing the two (off-policy mask, vLLM importance sampling) is biased."""
    penalty = (args.generation_kwargs or {}).get("repetition_penalty", args.repetition_penalty)
    compares = [
        name
        for name, on in (
            (f"off_policy_mask_threshold={args.off_policy_mask_threshold}", args.off_policy_mask_threshold is not None),
            (
                "use_vllm with vllm_importance_sampling_correction",
                args.use_vllm and args.vllm_importance_sampling_correction,
            ),
        )
        if on
    ]
    if penalty != 1.0 and compares:
        warnings.warn(
            f"EnvGRPOConfig: repetition_penalty={penalty} samples tokens from a distribution TRL's training logprobs "
            f"do not include, and {' and '.join(compares)} compares sampling with training logprobs: tokens the "
            "penalty favoured or disfavoured are masked or reweighted as if off-policy. Set repetition_penalty=1.0 "
            "or turn the comparison off.",
            stacklevel=3,
        )


def _check_group_size(index: GroupIndex, expected: int, field_name: str) -> None:
    builder = index.builder(index.key(0))

    async def probe() -> int:
        try:
            return len(await builder.make_envs())
        finally:
            await builder.cleanup()

    n = run_sync(probe)
    if n != expected:
        raise ValueError(
            f"EnvGRPOTrainer: {type(builder).__name__} of the {index.split} envs makes groups of {n} "
            f"envs but EnvGRPOConfig.{field_name}={expected}; they must be equal (one group = one "
            "GRPO group)."
        )
