"""``EnvGRPOTrainer``: TRL's ``GRPOTrainer`` with generation and rewards driven by environments.

How an env batch maps onto TRL (see docs/DESIGN.md):

* The trainer's dataset is one row per env group of the :class:`~trl_envs.core.types.RLDataset`: the text of its
  :class:`~trl_envs.trainers.group_index.GroupKey`. TRL's sampler repeats each row ``num_generations`` times in a row,
  so one block of G rows is one group.
* Each generation batch goes through TRL's public ``rollout_func`` (:func:`env_rollout_func`): it rolls out this
  rank's groups together (one batched ``generate`` per turn) and returns one row per trajectory (prompt = first
  observation, completion = actions + env tokens, ``env_mask`` = 1 exactly on sampled tokens, sampling logprobs) with
  the episodes as extra fields for the reward functions (:class:`~trl_envs.training_data.rows_step.RowsStep` lays them
  out).
* The rewards are TRL reward functions: ``env`` (the trajectory's total: step rewards + group reward) and the user's
  ``reward_funcs`` (:mod:`~trl_envs.trainers.reward_funcs`), combined by TRL, so ``reward_weights``,
  ``multi_objective_aggregation``, ``scale_rewards``, every ``loss_type``, ``beta``, PEFT, ``num_iterations`` and
  evaluation work as in TRL.
* What ``rollout_func`` cannot express goes through TRL's per-batch hook (``_generate_and_score_completions``, the
  one override of TRL's private methods besides the loss's for asynchronous rollouts): envs whose observations do not
  extend each other train one row per turn, in blocks of G rows per group, laid out here and then scored by TRL.
* ``credit_assignment="per_turn"`` replaces TRL's advantages by per-token ones from per-turn rewards-to-go
  (``credit``; docs/credit_assignment.md).
"""

from __future__ import annotations

import contextlib
import os
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
from .env_setup import (
    check_continuous_batching_version,
    check_env_launch,
    frozen_reference,
    load_env_datasets,
    text_tokenizer,
)
from .group_index import GroupIndex, GroupKey, keys_of_rows
from .grpo_config import EnvGRPOConfig
from .health import TrainingHealthCallback, check_finite_rewards
from .reward_funcs import EPISODE_FIELD, METRICS_FIELD, REWARD_FIELD, Episode, episode_reward_functions
from .rollouts import EnvRollouts, RolloutSource, SyncRolloutSource
from .run_guards import RunGuards
from .trl_warnings import replace_trl_reward_none_warning


class RowLayoutNeeded(Exception):
    """Raised by :func:`env_rollout_func` when this generation batch has episodes that train as one row per turn
    (or any rank's batch has), which TRL's ``rollout_func`` cannot return (it returns one row per prompt):
    ``EnvGRPOTrainer`` then lays the rolled-out batch out itself, without rolling it out again."""

    def __init__(self, step: RowsStep, keys: list[GroupKey]):
        super().__init__("this generation batch trains rows per turn")
        self.step, self.keys = step, keys


def env_rollout_func(prompts: list[str], trainer: EnvGRPOTrainer) -> dict[str, list]:
    """TRL's ``rollout_func`` of :class:`EnvGRPOTrainer`: roll out the env groups whose keys TRL's rows carry (each
    key ``num_generations`` times in a row) and return one row per episode (see
    :meth:`EnvGRPOTrainer.rollout_rows`)."""
    return trainer.rollout_rows(prompts)


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
        reward_funcs: rewards beside the env's, as ``GRPOTrainer`` takes them: callables with TRL's signature (sync
            or async), reward model ids or paths, ``PreTrainedModel`` objects (see
            :mod:`~trl_envs.trainers.reward_funcs` for what they see). The env's reward is the first reward function,
            named ``env``: ``reward_weights`` has one weight for it, then one per entry here.
        reward_processing_classes: the tokenizers of reward models given as objects (one per ``reward_funcs`` entry,
            ``None`` for the others), as in ``GRPOTrainer``.
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
        reward_funcs=None,
        reward_processing_classes=None,
    ):
        if not isinstance(args, EnvGRPOConfig):
            raise TypeError(f"EnvGRPOTrainer: args must be an EnvGRPOConfig, got {type(args).__name__}")
        trl_seam.check_trl_compatibility(trainer="grpo")  # an incompatible TRL fails here, not in a training step
        check_continuous_batching_version(args, "EnvGRPOTrainer")
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
        self._planned_rows: dict[str, list] | None = None
        reward_functions = episode_reward_functions(
            reward_funcs,
            reward_processing_classes,
            completions_as=args.reward_completions,
            model_init_kwargs=args.model_init_kwargs,
        )
        reference = frozen_reference(model, peft_config, needed=args.beta != 0.0)
        with (
            rollout_func_warning_silenced(),
            trl_seam.grpo_reference_model(reference) if reference is not None else contextlib.nullcontext(),
        ):
            super().__init__(
                model=model,
                reward_funcs=reward_functions,
                args=args,
                train_dataset=self.train_groups.as_dataset(),
                eval_dataset=self.eval_groups.as_dataset() if self.eval_groups is not None else None,
                processing_class=processing_class,
                callbacks=callbacks,
                optimizers=optimizers,
                peft_config=peft_config,
                rollout_func=env_rollout_func,
            )
        check_env_launch(self, "EnvGRPOTrainer", sampler)
        tokenizer = text_tokenizer(self.processing_class)
        for function in reward_functions[1:]:
            function.bind(tokenizer, self.accelerator.device)
        trl_seam.set_stop_token_ids(self, with_turn_stops(trl_seam.stop_token_ids(self), Renderer(tokenizer)))
        env_label = named_env(env_dataset, self.train_groups.builder(self.train_groups.key(0)))
        self.run_guards = RunGuards(self, model, env_label)
        self.add_callback(TrainingHealthCallback(args.health_patience, args.health_min_entropy, envs=env_label))
        replace_trl_reward_none_warning()  # TRL's per-step block about rows without reward -> one line
        self.rollout_source: RolloutSource = (
            PipelinedRolloutSource(self.rollouts, self) if args.max_staleness else SyncRolloutSource(self.rollouts)
        )
        if args.rollout_traces:
            from .trace_callback import RolloutTraceCallback

            self.add_callback(
                RolloutTraceCallback(self.rollouts, text_tokenizer(self.processing_class), args.rollout_traces)
            )

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
        return off_policy.policy_logprobs(self, batch, batch_size)

    # -- one generation batch: rollouts and the rows TRL trains on ----------------------------------------------

    def generation_batch(self, keys: Sequence[GroupKey | str]) -> dict[str, Any]:
        """Roll out the env groups ``keys`` (this rank's share of a generation batch), lay their trajectories out as
        rows (:class:`RowsStep`) and return the batch TRL trains on (ids, masks, sampling logprobs, advantages...),
        exactly as a training step (``model.training``) or an evaluation step does: TRL's per-batch hook calls it.

        Episodes that train as one row per episode go through TRL's public doors: TRL's scoring calls
        :func:`env_rollout_func`, which rolls them out, and scores them with the reward functions. A batch with rows
        per turn (``training_rows``, or observations that do not extend each other) or per-token advantages
        (``credit_assignment="per_turn"``), which ``rollout_func`` cannot return, is laid out here and then handed to
        TRL's scoring."""
        keys = [GroupKey.parse(k) for k in keys]
        if self.args.training_rows == "turn" or self.args.credit_assignment == "per_turn":
            return self._score_laid_out(self._roll_out(keys), keys)
        group_size = group_size_of(self.args, training=self.model.training)
        try:
            return self._score([{"prompt": str(k)} for k in keys for _ in range(group_size)])
        except RowLayoutNeeded as needed:
            return self._score_laid_out(needed.step, needed.keys)

    def rollout_rows(self, prompts: Sequence[str]) -> dict[str, list]:
        """What :func:`env_rollout_func` returns to TRL for the rows ``prompts`` (group key texts, each
        ``num_generations`` times in a row): the rolled-out episodes, one row per episode (``prompt_ids``,
        ``completion_ids``, ``logprobs``, ``env_mask`` = 1 on sampled tokens), and the fields TRL passes to the reward
        functions (``env_reward``, ``env_episode``, ``env_metrics``). Raises :class:`RowLayoutNeeded` when an episode
        of this batch (on any rank) trains as one row per turn."""
        if self._planned_rows is not None:  # rows laid out by _generate_and_score_completions
            columns, self._planned_rows = self._planned_rows, None
            if len(columns["prompt_ids"]) != len(prompts):
                raise RuntimeError(
                    f"EnvGRPOTrainer: TRL asked for {len(prompts)} rows, {len(columns['prompt_ids'])} were laid out"
                )
            return columns
        group_size = group_size_of(self.args, training=self.model.training)
        keys = keys_of_rows(list(prompts), group_size)
        step = self._roll_out(keys)
        per_turn = step.plan.num_per_turn_trajectories > 0
        if self.accelerator.num_processes > 1:  # every rank takes the same path (both gather across ranks)
            flag = torch.tensor([float(per_turn)], device=self.accelerator.device)
            per_turn = bool(self.accelerator.gather(flag).max() > 0)
        if per_turn:
            raise RowLayoutNeeded(step, keys)
        return self._row_columns(step, keys)

    def _roll_out(self, keys: list[GroupKey]) -> RowsStep:
        """Roll out the groups ``keys`` (training: from the rollout source, recorded; evaluation: not recorded) and
        lay their trajectories out as rows."""
        mode = "train" if self.model.training else "eval"
        builders = [self.env_group(k) for k in keys]
        if mode == "train":
            result = self.rollout_source.rollout(builders, keys)
        else:
            result = self.rollouts.rollout(builders)
        names = [f"{type(b).__name__} (row {k})" for k, b in zip(keys, builders)]
        check_finite_rewards(result.groups, names, self.state.global_step + (mode == "train"), self.accelerator)
        group_size = group_size_of(self.args, training=mode == "train")
        return RowsStep.from_rollout(result, group_size=group_size, training_rows=self.args.training_rows, names=names)

    def _row_columns(self, step: RowsStep, keys: list[GroupKey]) -> dict[str, Any]:
        """The rows of ``step`` as ``rollout_func`` output, with the reward functions' fields."""
        plan = step.plan
        columns = plan.rollout_output(
            text_tokenizer(self.processing_class).pad_token_id, trl_seam.stop_token_ids(self)[0]
        )
        columns[REWARD_FIELD] = columns.pop("rewards")
        sequences = {
            (r.group, r.trajectory): r.row.prompt_ids + r.row.completion_ids for r in plan.rows if r.row is not None
        }
        episodes = {}
        for g, group in enumerate(step.rollout.groups):
            if group is not None:
                for i, (trajectory, total) in enumerate(zip(group.trajectories, group.get_total_rewards())):
                    episodes[g, i] = Episode(
                        str(keys[g]), i, trajectory, total, list(group.tags), sequences.get((g, i), [])
                    )
        columns[EPISODE_FIELD] = [
            None if r.reward is None else episodes.get((r.group, r.trajectory)) for r in plan.rows
        ]
        columns[METRICS_FIELD] = step.metrics()  # one dict for the batch: the env reward function logs it
        return columns

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's per-generation-batch hook: :meth:`generation_batch` of the group keys of this rank's rows (the one
        private method of TRL overridden: for the rows ``rollout_func`` cannot return; see there)."""
        group_size = group_size_of(self.args, training=self.model.training)
        return self.generation_batch(keys_of_rows([x["prompt"] for x in inputs], group_size))

    def _score_laid_out(self, step: RowsStep, keys: list[GroupKey]) -> dict[str, Any]:
        """TRL's scoring of the rows of ``step`` laid out here (padded to a common shape across ranks)."""
        mode = "train" if self.model.training else "eval"
        plan = step.plan
        self._pad_to_common_shape(plan, mode)
        self._planned_rows = self._row_columns(step, keys)
        try:
            output = self._score([{"prompt": str(keys[r.group or 0])} for r in plan.rows])
        finally:
            self._planned_rows = None
        if self.args.credit_assignment == "per_turn":
            output["advantages"] = self._per_turn_advantages(
                plan, step.rollout.groups, output["completion_ids"].size(1)
            )
        return output

    def _score(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's generation (``rollout_func``) and scoring of ``rows``; with asynchronous rollouts, the advantages
        weighted by the sampler's importance ratio (:mod:`~trl_envs.trainers.off_policy`)."""
        output = super()._generate_and_score_completions(rows)
        if off_policy.correction_on(self.args, self.model.training) and not off_policy.ratio_in_loss(self.args):
            off_policy.correct_advantages(self, output)
        return output

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """``Trainer.compute_loss`` (TRL's GRPO loss); with asynchronous rollouts and one optimizer pass per
        generation batch, the advantages are first weighted by the importance ratio taken from the loss's own
        forward pass (:mod:`~trl_envs.trainers.off_policy`)."""
        if off_policy.correction_on(self.args, self.model.training) and off_policy.ratio_in_loss(self.args):
            with off_policy.ratio_from_loss(self, inputs):
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

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


@contextlib.contextmanager
def rollout_func_warning_silenced():
    """Build a ``GRPOTrainer`` with ``rollout_func`` without its experimental-feature warning: ``rollout_func`` is how
    EnvGRPOTrainer plugs in, not something its user opted into. TRL's documented switch for that warning is the
    environment variable ``TRL_EXPERIMENTAL_SILENCE=1`` (restored afterwards)."""
    previous = os.environ.get("TRL_EXPERIMENTAL_SILENCE")
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TRL_EXPERIMENTAL_SILENCE"]
        else:
            os.environ["TRL_EXPERIMENTAL_SILENCE"] = previous


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
