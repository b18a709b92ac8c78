"""``EnvGRPOTrainer``: TRL's ``GRPOTrainer`` with generation and rewards driven by environments.

How an env batch maps onto TRL (see docs/DESIGN.md):

* The trainer's dataset is one row per env group of the :class:`~trl_envs.core.types.RLDataset`: the text of its
  :class:`~trl_envs.trainers.group_index.GroupKey`. TRL's sampler repeats each row ``num_generations`` times in a row,
  so one block of G rows is one group.
* Each generation batch (:meth:`EnvGRPOTrainer.generation_batch`, which TRL's per-batch hook calls) rolls out this
  rank's groups together (one batched ``generate`` per turn) and lays the trajectories out as rows
  (:class:`~trl_envs.training_data.rows_step.RowsStep`): one row per trajectory (prompt = first observation,
  completion = actions + env tokens, ``env_mask`` = 1 exactly on sampled tokens, sampling logprobs), or one row per
  turn for envs whose observations do not extend each other, in blocks of G rows per group. TRL then scores exactly
  those rows: each row rides in the prompt TRL hands its ``rollout_func`` (:mod:`~trl_envs.trainers.row_prompts`).
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
from ..core.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder
from ..registry.names import env_label as named_env
from ..rollout.engine import RolloutBatchResult
from ..rollout.event_loop import run_sync
from ..samplers.base import Sampler
from ..training_data.credit import first_turn_returns, row_token_advantages
from ..training_data.row_layout import RowPlan, check_group_size
from ..training_data.rows_step import RowsStep
from . import off_policy, trl_seam
from .async_rollouts import PipelinedRolloutSource
from .env_setup import check_env_launch, frozen_reference, load_env_datasets
from .group_index import GroupIndex, GroupKey, keys_of_rows
from .grpo_config import EnvGRPOConfig
from .health import TrainingHealthCallback, check_finite_rewards
from .rollouts import EnvRollouts, RolloutSource, SyncRolloutSource
from .row_prompts import planned_rows, row_prompts
from .run_guards import RunGuards
from .trl_warnings import replace_trl_reward_none_warning

ENV_REWARD_KEY = "env_reward"


def env_reward(completions, env_reward: list[float | None], **kwargs) -> list[float | None]:
    """TRL reward function: the env's total reward of each trajectory (``None`` for rows of skipped groups)."""
    return list(env_reward)


env_reward.__name__ = "env"


class EnvGRPOTrainer(GRPOTrainer):
    """GRPO on environments. Takes env datasets instead of a prompt dataset; everything else is ``GRPOTrainer``.

    Args:
        model: model id, path, or ``PreTrainedModel``. With ``beta > 0`` the reference model is the model as passed:
            loaded from the id/path, a frozen copy of a model object (also one changed in memory since it was
            loaded), or the model with its adapter switched off under PEFT.
        args: :class:`~trl_envs.trainers.grpo_config.EnvGRPOConfig`.
        env_dataset: the training envs: an :class:`RLDataset`, an :class:`RLDatasetBuilder` (whose test split
            becomes the evaluation envs unless ``eval_env_dataset`` is given; with ``eval_strategy="no"`` none of its
            games is made until ``evaluate()`` is called), or a ``datasets.Dataset`` / ``IterableDataset`` of env row
            specs (one group of ``num_generations`` envs per row, see
            :class:`~trl_envs.registry.env_datasets.EnvRowDataset`).
        eval_env_dataset: evaluation envs (optional; an ``RLDataset`` or a dataset of row specs); evaluation logs
            ``eval_env/...``.
        processing_class: the tokenizer (must have a chat template; it must be the tokenizer the envs' renderer
            uses).
        peft_config: a PEFT config to train an adapter (then ``beta > 0`` uses the adapter-free model as reference).
        sampler: optional :class:`~trl_envs.samplers.base.Sampler` to generate with instead of the policy itself.
        callbacks, optimizers: as in ``transformers.Trainer``.

    Attributes:
        rollouts: the trainer's :class:`~trl_envs.trainers.rollouts.EnvRollouts`: the sampler, the model it generates
            with, budgets and error strategy; every rollout of the trainer goes through it.
        rollout_source: where training batches' rollouts come from: a
            :class:`~trl_envs.trainers.rollouts.SyncRolloutSource`, or with ``max_staleness >= 1`` a
            :class:`~trl_envs.trainers.async_rollouts.PipelinedRolloutSource` (rolled out ahead, in the background).
        run_guards: the :class:`~trl_envs.trainers.run_guards.RunGuards` of ``train()`` (checkpoint checks,
            ``output_dir`` lock, a full disk or out of memory named).
        last_rollout: the :class:`RolloutBatchResult` of this rank's latest training batch (evaluation rollouts do not
            replace it).
        policy_sampler: the kept in-process sampler of ``sampler_backend`` ``static_cache`` /
            ``continuous_batching`` (``None`` before the first rollout and for ``generate``).
        async_batches: with ``max_staleness >= 1``, one record per trained generation batch of the latest
            ``train()`` (see :class:`~trl_envs.trainers.async_rollouts.PipelinedRolloutSource`); else empty.
        async_rollouts_running: whether the background rollout pipeline is running (only inside ``train()``).
        train_groups: the :class:`~trl_envs.trainers.group_index.GroupIndex` of the training envs (its ``dataset`` is
            the training ``RLDataset``); ``eval_groups``: the evaluation envs' (``None`` without evaluation envs).

    Raises:
        ValueError: at construction, a per-rank generation batch that is not a multiple of the group size (groups
            would straddle ranks) or a tokenizer without chat template; at the first generation batch, an env group
            whose size is not ``num_generations`` (named, with both numbers).
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
        trl_seam.check_trl_compatibility()  # an incompatible TRL fails here, not in a training step
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
        self.train_groups = GroupIndex("train", train_envs)
        self.eval_groups = GroupIndex("eval", eval_envs) if eval_envs is not None else None
        _check_first_group(self.train_groups, args.num_generations)
        if self.eval_groups is not None and args.eval_strategy != "no":
            # Without evaluation during training no game of the test split is made here (one whose opponent cannot
            # play, say, must not stop a run that never evaluates); an explicit evaluate() checks each group it plays.
            _check_first_group(self.eval_groups, args.num_generations_eval or args.num_generations)
        self.rollouts = EnvRollouts(self, sampler)
        reference = frozen_reference(model, peft_config, needed=args.beta != 0.0)
        with (
            trl_seam.rollout_func_warning_silenced(),
            trl_seam.grpo_reference_model(reference) if reference is not None else contextlib.nullcontext(),
        ):
            super().__init__(
                model=model,
                reward_funcs=[env_reward],
                args=args,
                train_dataset=self.train_groups.as_dataset(),
                eval_dataset=self.eval_groups.as_dataset() if self.eval_groups is not None else None,
                processing_class=processing_class,
                callbacks=callbacks,
                optimizers=optimizers,
                peft_config=peft_config,
                rollout_func=planned_rows,
            )
        check_env_launch(self, "EnvGRPOTrainer", sampler)
        trl_seam.set_stop_token_ids(
            self, with_turn_stops(trl_seam.stop_token_ids(self), Renderer(trl_seam.tokenizer_of(self)))
        )
        env_label = named_env(env_dataset, self.train_groups.builder(self.train_groups.key(0)))
        self.run_guards = RunGuards(self, model, env_label)
        self.add_callback(TrainingHealthCallback(args.health_patience, args.health_min_entropy, envs=env_label))
        replace_trl_reward_none_warning()  # TRL's per-step block about rows without reward -> one line
        self.rollout_source: RolloutSource = (
            PipelinedRolloutSource(self.rollouts, self) if args.max_staleness else SyncRolloutSource(self.rollouts)
        )
        if args.rollout_traces:
            from .trace_callback import RolloutTraceCallback

            self.add_callback(RolloutTraceCallback(self.rollouts, trl_seam.tokenizer_of(self), args.rollout_traces))

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs):
        """``GRPOTrainer.train`` holding ``output_dir``'s lock; ``resume_from_checkpoint`` (a folder, or ``True`` /
        ``"last"`` for the newest complete one) is checked first (see :mod:`~trl_envs.trainers.checkpoints`). The
        rollout source runs for the length of the call (``max_staleness >= 1``: the background pipeline is stopped
        when training returns or raises)."""
        checkpoint = self.run_guards.checkpoint(resume_from_checkpoint)
        with self.run_guards.running(), contextlib.closing(self.rollout_source):
            self.rollout_source.open()
            return super().train(
                resume_from_checkpoint=checkpoint, trial=trial, ignore_keys_for_eval=ignore_keys_for_eval, **kwargs
            )

    # -- the rollout component's state, as attributes of the trainer ----------------------------------------------

    @property
    def last_rollout(self) -> RolloutBatchResult | None:
        return self.rollouts.last_rollout

    @property
    def policy_sampler(self) -> Sampler | None:
        return self.rollouts.policy_sampler

    @property
    def async_batches(self) -> list[dict[str, Any]]:
        return getattr(self.rollout_source, "batches", [])

    @property
    def async_rollouts_running(self) -> bool:
        return getattr(self.rollout_source, "running", False)

    # -- public accessors --------------------------------------------------------------------------------------

    def env_group(self, key: GroupKey | str) -> EnvGroupBuilder:
        """The env group behind a group key (a :class:`GroupKey` or its text, e.g. ``"train/0/1"``). Raises
        ``KeyError`` for a key outside the trainer's env datasets."""
        key = GroupKey.parse(key)
        index = {"train": self.train_groups, "eval": self.eval_groups}.get(key.split)
        if index is None:
            raise KeyError(f"EnvGRPOTrainer: no {key.split} env dataset for group key {str(key)!r}")
        return index.builder(key)

    def logged_metrics(self, mode: str = "train") -> dict[str, list[float]]:
        """The metrics gathered since the last ``log()`` in ``mode`` (``"train"`` / ``"eval"``): name -> values, whose
        mean ``log()`` logs."""
        return trl_seam.logged_metrics(self, mode)

    def logged_completions(self) -> dict[str, Any]:
        """TRL's record of the latest scored rows, gathered over processes (at most ``generation_batch_size``):
        ``prompt`` (the group key texts), ``completion``, ``rewards`` (reward name -> values; the env's is ``"env"``)
        and ``advantages``, oldest first."""
        return trl_seam.logged_completions(self)

    def completion_logprobs(self, batch: dict[str, Any], batch_size: int | None = None) -> torch.Tensor:
        """The current policy's per-token log-probabilities (B, T) of the completions of a batch returned by
        :meth:`generation_batch`, computed as TRL's loss computes them (at the sampling temperature), without
        gradient."""
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        with torch.no_grad():
            return trl_seam.per_token_logprobs(self, self.model, ids, mask, batch["completion_ids"].size(1), batch_size)

    # -- one generation batch: rollouts and the rows TRL trains on ----------------------------------------------

    def generation_batch(self, keys: Sequence[GroupKey | str]) -> dict[str, Any]:
        """Roll out the env groups ``keys`` (this rank's share of a generation batch), lay their trajectories out as
        rows (:class:`RowsStep`) and return the batch TRL trains on (ids, masks, sampling logprobs, advantages...),
        exactly as a training step (``model.training``) or an evaluation step does. With
        ``credit_assignment="per_turn"`` the advantages are per token, from per-turn rewards-to-go."""
        mode = "train" if self.model.training else "eval"
        group_size = group_size_of(self.args, training=mode == "train")
        keys = [GroupKey.parse(k) for k in keys]
        builders = [self.env_group(k) for k in keys]
        if mode == "train":
            result = self.rollout_source.rollout(builders, keys)
        else:
            result = self.rollouts.rollout(builders)
        names = [f"{type(b).__name__} (row {k})" for k, b in zip(keys, builders)]
        check_finite_rewards(result.groups, names, self.state.global_step + (mode == "train"), self.accelerator)
        step = RowsStep.from_rollout(result, group_size=group_size, training_rows=self.args.training_rows, names=names)
        plan = step.plan
        self._pad_to_common_shape(plan, mode)
        trl_seam.record_mean_metrics(self, mode, step.metrics())  # one gather for all env metrics of the step
        columns = plan.rollout_output(trl_seam.tokenizer_of(self).pad_token_id, trl_seam.stop_token_ids(self)[0])
        columns[ENV_REWARD_KEY] = columns.pop("rewards")
        texts = [str(keys[r.group or 0]) for r in plan.rows]  # padding blocks stand for the first group
        rows = [{"prompt": prompt} for prompt in row_prompts(texts, columns)]
        output = self._score(rows)
        if self.args.credit_assignment == "per_turn":
            output["advantages"] = self._per_turn_advantages(plan, result.groups, output["completion_ids"].size(1))
        return output

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's per-generation-batch hook: :meth:`generation_batch` of the group keys of this rank's rows."""
        group_size = group_size_of(self.args, training=self.model.training)
        return self.generation_batch(keys_of_rows([x["prompt"] for x in inputs], group_size))

    def _score(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's scoring of the planned ``rows`` (its ``rollout_func`` returns exactly these rows), with the sampler's
        importance-sampling correction on where asynchronous rollouts compute it there
        (:mod:`~trl_envs.trainers.off_policy`)."""
        if not off_policy.correction_on(self.args, self.model.training) or off_policy.ratio_in_loss(self.args):
            return super()._generate_and_score_completions(rows)
        with off_policy.sampler_correction(self):
            output = super()._generate_and_score_completions(rows)
        off_policy.record_importance_weights(self, output["importance_sampling_ratio"], off_policy.trained_mask(output))
        return output

    def _compute_loss(self, model, inputs):
        """TRL's loss; with asynchronous rollouts, corrected for the sampler's logprobs (the ratio TRL's scoring
        computed, or one from the loss forward's own logprobs: :mod:`~trl_envs.trainers.off_policy`)."""
        if not off_policy.correction_on(self.args, self.model.training):
            return super()._compute_loss(model, inputs)
        if "importance_sampling_ratio" in inputs:  # computed by TRL's scoring
            with off_policy.sampler_correction(self):
                return super()._compute_loss(model, inputs)
        with off_policy.ratio_from_loss(self, inputs):
            return super()._compute_loss(model, inputs)

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

    def _per_turn_advantages(self, plan: RowPlan, groups, width: int) -> torch.Tensor:
        scale = (
            self.args.scale_rewards
            if self.args.scale_rewards in ("group", "batch", "none")
            else ("group" if self.args.scale_rewards else "none")
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


def group_size_of(args, training: bool) -> int:
    """The envs per group in training or in evaluation (``num_generations_eval``, default ``num_generations``)."""
    return args.num_generations if training else (args.num_generations_eval or args.num_generations)


def with_turn_stops(eos_token_ids: Sequence[int], renderer: Renderer) -> list[int]:
    """TRL's ``eos_token_ids`` plus the chat template's stop tokens.

    TRL counts a row as truncated when its last token is not in ``eos_token_ids`` (+ pad), and with
    ``mask_truncated_completions`` trains nothing of it. TRL takes those ids from the tokenizer's and generation
    config's EOS only, so for a base ChatML model (EOS ``<|endoftext|>``, end of turn ``<|im_end|>``) every finished
    answer would count as truncated. The tokenizer's EOS stays first (it pads the filler rows).
    """
    ids = list(eos_token_ids)
    return ids + [t for t in renderer.get_stop_sequences() if t not in ids]


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


def _check_first_group(index: GroupIndex, group_size: int) -> None:
    """Make the first group of ``index`` once (then clean it up) and check its size with :func:`check_group_size`,
    so a builder of the wrong group size fails when the trainer is built, before a model is trained or evaluated.
    Every group is checked again when its rows are planned."""
    key = index.key(0)
    builder = index.builder(key)

    async def made() -> int:
        try:
            return len(await builder.make_envs())
        finally:
            await builder.cleanup()

    check_group_size(f"{type(builder).__name__} (row {key})", run_sync(made), group_size)
