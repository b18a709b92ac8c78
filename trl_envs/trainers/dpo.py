"""``EnvDPOTrainer``: TRL's ``DPOTrainer`` on preference datasets, and iterative DPO driven by environments.

Two uses (see docs/dpo.md):

* **Offline DPO** (``train_dataset``): a dataset with ``prompt`` / ``chosen`` / ``rejected`` (text or chat
  messages), trained exactly as TRL's ``DPOTrainer`` does, with clearer errors (missing columns, empty answers, a
  tokenizer without chat template for chat data) and a reference model also for models built in memory. A
  pre-tokenized dataset (``prompt_ids`` / ``chosen_ids`` / ``rejected_ids``, optional ``chosen_mask`` /
  ``rejected_mask``, e.g. pairs from :func:`~trl_envs.training_data.preference.make_preference_pairs`) is used as is.
* **Env-driven DPO** (``env_dataset``): ``num_rounds`` rounds of *sample a batch of env groups with the current
  policy → pair the best and the worst trajectory of each group → train DPO on the pairs*. Multi-turn pairs keep
  env tokens out of the loss: the per-token masks of the pairs are applied to TRL's ``completion_mask``, the only
  mask its loss uses.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset, IterableDataset
from transformers import AutoTokenizer, PreTrainedTokenizerBase, TrainerCallback, TrainerState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, TrainOutput
from trl import DPOConfig, DPOTrainer
from trl.data_utils import is_conversational

from ..core.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder
from ..rollout.engine import RolloutBatchResult
from ..rollout.metrics import rollout_metrics, summarize
from ..samplers.base import Sampler
from ..training_data.preference import PAIR_COLUMNS, PairStats, make_preference_pairs
from . import trl_seam
from .base import (
    EnvTrainerMixin,
    check_single_process_launch,
    frozen_reference_copy,
    require_chat_template,
    resolve_env_datasets,
)
from .checkpoints import hold_output_dir
from .dpo_config import EnvDPOConfig
from .resume import rng_state, set_rng_state
from .trl_seam import dpo_tokens_seen, set_dpo_tokens_seen

TOKENIZED_COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids")
ROUND_STATE_FILE = "env_dpo_rounds.json"
"""In an env-driven DPO checkpoint: the rounds done and their logged values."""
ROUND_RNG_FILE = "env_dpo_rng_{rank}.pt"
"""In an env-driven DPO checkpoint: each process's random state at the end of the round."""
MASK_COLUMNS = ("chosen_mask", "rejected_mask")


class EmptyPairsWarning(UserWarning):
    """A round of env-driven DPO produced no preference pair (every group tied, or was skipped)."""


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


@trl_seam.model_tags("trl", "dpo", "trl_envs")
class EnvDPOTrainer(EnvTrainerMixin, DPOTrainer):
    """DPO on a preference dataset or on pairs sampled from environments (see the module docstring).

    Args:
        model: model id, path, ``PreTrainedModel`` or ``PeftModel``.
        ref_model: the reference policy. Default: the initial policy — reloaded from the model's path for a model
            given by id/path (TRL), a frozen in-memory copy for a model object given without PEFT (its weights may
            differ from any saved copy), the adapter switched off with ``peft_config``.
        args: :class:`~trl_envs.trainers.dpo_config.EnvDPOConfig` (a plain ``DPOConfig`` works for offline DPO).
        data_collator: default :class:`DataCollatorForMaskedPreference`.
        train_dataset: the preference dataset (offline DPO). Exactly one of ``train_dataset`` and ``env_dataset``.
        eval_dataset: preference data to evaluate the DPO loss and rewards on (as in TRL).
        processing_class: the tokenizer (default: loaded from the model). In env mode it must be the tokenizer of
            the envs' renderer.
        env_dataset: env-driven DPO: an :class:`RLDataset`, or an :class:`RLDatasetBuilder` whose test split becomes
            the evaluation envs unless ``eval_env_dataset`` is given.
        eval_env_dataset: envs played (all batches) before the first round and after each round when
            ``args.eval_envs_each_round``; logged as ``eval_env/...``.
        sampler: a :class:`~trl_envs.samplers.base.Sampler` to roll out with instead of the policy itself.
        compute_metrics, callbacks, optimizers, quantization_config, peft_config: as in ``DPOTrainer``.

    Attributes (env mode):
        round_history: one dict per finished round, the values logged for it.
        last_rollout: the :class:`RolloutBatchResult` of this rank's latest training rollout.
        last_pair_stats: the :class:`~trl_envs.training_data.preference.PairStats` of the latest round (all ranks).

    Rounds reuse this one trainer: each round sets ``self.train_dataset`` to the round's pairs and runs the
    ``Trainer`` training loop (``Trainer.train``) on them. Between rounds:

    * the optimizer (and its Adam moments) carries over; accelerate's wrapper of the previous round is removed first
      so the optimizer is not wrapped twice;
    * the learning-rate scheduler is rebuilt by ``Trainer`` at the start of each round (it would otherwise stay at
      the end of a decayed schedule, e.g. 0 for ``linear``): the schedule restarts every round, and
      ``num_train_epochs`` / ``max_steps`` / warmup are per round;
    * the ``TrainerState`` that ``Trainer.train`` recreates keeps counting: ``global_step``, ``log_history``, FLOPs
      and tokens seen continue from the previous round, so loggers (``report_to``) see one run;
    * the reference model stays the initial policy (DPO against a moving reference is ``sync_ref_model``).

    Checkpoints and resuming in env mode (docs/dpo.md): a round is the unit of a checkpoint. Its pairs were sampled
    with the weights of the round's start, so a checkpoint taken inside a round could not be continued exactly;
    instead the Trainer's own saves inside rounds are turned off and a checkpoint is written at the end of a round
    (``checkpoint-<global_step>``) when ``save_strategy`` asks for one: ``"steps"``: the round crossed a multiple of
    ``save_steps``; ``"epoch"`` / ``"best"``: every round. Besides the Trainer's files (weights, optimizer, scheduler,
    ``trainer_state.json``) it holds the rounds done and their logs (``env_dpo_rounds.json``) and every process's
    random state (``env_dpo_rng_<rank>.pt``). ``train(resume_from_checkpoint=...)`` (a folder, or ``True`` for the
    last one in ``output_dir``) restores weights, optimizer moments, ``TrainerState`` (global step, log history), the
    round counter and the random state, then continues with the next round: its batches are the ones the round
    index picks, sampled by the same weights with the same random state, so the run goes on exactly as if it had
    not stopped (same number of processes; not under DeepSpeed / FSDP, refused with an error).

    Raises:
        ValueError: no dataset or both kinds; a preference dataset without ``chosen`` / ``rejected`` (the columns
            found are named), with an empty answer, or in chat format with a tokenizer without chat template;
            ``precompute_ref_log_probs`` in env mode.
    """

    def __init__(
        self,
        model,
        ref_model=None,
        args: DPOConfig | None = None,
        data_collator=None,
        train_dataset: Dataset | IterableDataset | None = None,
        eval_dataset=None,
        processing_class=None,
        compute_metrics=None,
        callbacks=None,
        optimizers=(None, None),
        quantization_config=None,
        peft_config=None,
        *,
        env_dataset: RLDataset | RLDatasetBuilder | None = None,
        eval_env_dataset: RLDataset | None = None,
        sampler: Sampler | None = None,
    ):
        self._init_env_trainer(sampler)
        if (train_dataset is None) == (env_dataset is None):
            raise ValueError(
                "EnvDPOTrainer: give exactly one of train_dataset (a preference dataset: offline DPO) "
                "and env_dataset (an RLDataset or RLDatasetBuilder: env-driven DPO)"
            )
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "_name_or_path", "") or "model"
            args = EnvDPOConfig(output_dir=f"{name.rstrip('/').split('/')[-1]}-DPO")
        self._env_mode = env_dataset is not None
        self._train_envs: RLDataset | None = None
        self._eval_envs: RLDataset | None = None
        if self._env_mode:
            if not isinstance(args, EnvDPOConfig):
                raise TypeError(f"EnvDPOTrainer: env-driven DPO needs an EnvDPOConfig, got {type(args).__name__}")
            if args.precompute_ref_log_probs:
                raise ValueError(
                    "EnvDPOConfig: precompute_ref_log_probs=True cannot be used with env_dataset: the "
                    "pairs are sampled during training, after the reference would have been computed. "
                    "Set precompute_ref_log_probs=False."
                )
            self._train_envs, self._eval_envs = resolve_env_datasets(
                env_dataset, eval_env_dataset, "EnvDPOTrainer", seed=args.seed
            )
            train_dataset = _placeholder_pairs()  # DPOTrainer needs a dataset now; each round replaces it

        tokenizer = processing_class
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(
                model if isinstance(model, str) else getattr(model.config, "_name_or_path", "")
            )
            processing_class = tokenizer
        text_tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        if self._env_mode:
            require_chat_template(text_tokenizer, "EnvDPOTrainer")
        if isinstance(text_tokenizer, PreTrainedTokenizerBase) and text_tokenizer.pad_token is None:
            text_tokenizer.pad_token = text_tokenizer.eos_token
        if data_collator is None and not _is_vision(train_dataset):
            data_collator = DataCollatorForMaskedPreference(
                pad_token_id=text_tokenizer.pad_token_id,
                max_length=args.max_length,
                truncation_mode=args.truncation_mode,
                pad_to_multiple_of=args.pad_to_multiple_of,
            )
        if ref_model is None:
            ref_model = _in_memory_reference(model, args, peft_config)

        self.round_history: list[dict[str, float]] = []
        self.last_pair_stats: PairStats | None = None
        self._in_rounds = False
        self._round_step_offset = 0
        self._round_acc: dict[str, list] | None = None
        self._resume_optimizer_state: dict | None = None
        super().__init__(
            model,
            ref_model=ref_model,
            args=args,
            data_collator=data_collator,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            compute_metrics=compute_metrics,
            callbacks=callbacks,
            optimizers=optimizers,
            quantization_config=quantization_config,
            peft_config=peft_config,
        )
        check_single_process_launch(self.accelerator.num_processes, os.environ, "EnvDPOTrainer")
        self._mark_checkpoints(model, type(self._train_envs).__name__ if self._env_mode else None)
        if self._env_mode:
            self.add_callback(_NoCheckpointsInsideRounds())

    # -- datasets ----------------------------------------------------------------------------------------------

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        """Pre-tokenized pairs pass through (checked, and filtered on ``max_length`` as TRL does); raw preference
        data is checked, then tokenized by TRL."""
        first = next(iter(dataset), None)
        if first is None:
            raise ValueError(f"EnvDPOTrainer: the {dataset_name} dataset is empty")
        if all(c in first for c in TOKENIZED_COLUMNS):
            _check_tokenized(dataset, dataset_name)
            if not self._env_mode:  # env-driven pairs differ in reward, so in tokens
                dataset = drop_identical_pairs(dataset, dataset_name, ("chosen_ids", "rejected_ids"))
            if (
                args.max_length is not None
                and args.truncation_mode == "keep_start"
                and not (isinstance(dataset, Dataset) and all(len(p) < args.max_length for p in dataset["prompt_ids"]))
            ):
                dataset = dataset.filter(lambda ex: len(ex["prompt_ids"]) < args.max_length)
            return dataset
        _check_columns(dataset, first, dataset_name)
        tokenizer = trl_seam.tokenizer_of(self)
        if is_conversational(first) and not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"EnvDPOTrainer: the {dataset_name} dataset is conversational (its columns hold chat messages) but the "
                f"tokenizer {tokenizer.name_or_path!r} has no chat template to render them. Use a chat/instruct "
                "model, set tokenizer.chat_template, or give prompt/chosen/rejected as plain text."
            )
        dataset = _check_not_empty(dataset, dataset_name)
        dataset = drop_identical_pairs(dataset, dataset_name, ("chosen", "rejected"))
        return super()._prepare_dataset(dataset, processing_class, args, dataset_name)

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        trl_seam.keep_columns(self, MASK_COLUMNS)

    # -- training ----------------------------------------------------------------------------------------------

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs) -> TrainOutput:
        """Offline: ``DPOTrainer.train``. Env mode: ``args.num_rounds`` rounds of sampling and DPO training."""
        checkpoint = self._checked_checkpoint(resume_from_checkpoint)
        with hold_output_dir(self.args.output_dir):
            if not self._env_mode:
                return super().train(
                    resume_from_checkpoint=checkpoint, trial=trial, ignore_keys_for_eval=ignore_keys_for_eval, **kwargs
                )
            first_round = self._load_round_checkpoint(checkpoint) if checkpoint is not None else 0
            return self._train_rounds(trial, ignore_keys_for_eval, first_round)

    def _train_rounds(self, trial, ignore_keys_for_eval, first_round: int = 0) -> TrainOutput:
        args: EnvDPOConfig = self.args
        losses: list[float] = []
        last: dict[str, float] = {}
        if self._eval_envs is not None and args.eval_envs_each_round and first_round == 0:
            self._log_and_print({"round": 0.0, **self._evaluate_envs()}, 0)
        for r in range(first_round, args.num_rounds):
            start = time.perf_counter()
            steps_before = self.state.global_step
            rows, stats, env_logs = self._sample_pairs(r)
            self.last_pair_stats = stats
            logs: dict[str, float] = {"round": float(r + 1), **env_logs, **stats.as_metrics()}
            if args.max_length is not None and args.truncation_mode == "keep_start":  # as TRL: nothing left to train
                kept = [row for row in rows if len(row["prompt_ids"]) < args.max_length]
                if len(kept) < len(rows):
                    logs["pairs/too_long"] = float(len(rows) - len(kept))
                rows = kept
            dataset = Dataset.from_list(rows) if rows else None
            if dataset is None:
                warnings.warn(
                    f"EnvDPOTrainer: round {r + 1} made no preference pair from {stats.num_groups} env groups "
                    f"({stats.ties} all ties, {stats.skipped} skipped after errors, {stats.prompt_mismatch} with "
                    f"different prompts, {stats.too_small} with < 2 trajectories, {stats.identical} identical, "
                    f"{logs.get('pairs/too_long', 0):.0f} longer than max_length); no training this round. More "
                    "envs per group, a higher temperature, or a finer-grained reward give more pairs.",
                    EmptyPairsWarning,
                    stacklevel=3,
                )
            else:
                logs.update(self._train_one_round(dataset, trial, ignore_keys_for_eval))
                losses.append(logs["round/loss"])
            if self._eval_envs is not None and args.eval_envs_each_round:
                logs.update(self._evaluate_envs())
            logs["round/seconds"] = time.perf_counter() - start
            self._log_and_print(logs, r + 1)
            last = logs
            if self._round_checkpoint_due(steps_before, self.state.global_step):
                self._save_round_checkpoint(r + 1, trial)
        train_loss = sum(losses) / len(losses) if losses else float("nan")
        return TrainOutput(self.state.global_step, train_loss, {"train_loss": train_loss, **last})

    def _train_one_round(self, dataset: Dataset, trial, ignore_keys_for_eval) -> dict[str, float]:
        from accelerate.optimizer import AcceleratedOptimizer

        self.train_dataset = dataset
        if isinstance(self.optimizer, AcceleratedOptimizer):  # else accelerate wraps the wrapper again
            self.optimizer = self.optimizer.optimizer
        self._round_acc = defaultdict(list)
        self._round_step_offset = self.state.global_step
        self._in_rounds = True
        try:
            super().train(trial=trial, ignore_keys_for_eval=ignore_keys_for_eval)
        finally:
            self._in_rounds = False
            acc, self._round_acc = self._round_acc, None
        out = {"round/steps": float(self.state.global_step - self._round_step_offset)}
        losses = acc.pop("loss", [])
        if losses:
            local = torch.stack(losses).float().mean().reshape(1).to(self.accelerator.device)
            out["round/loss"] = self.accelerator.gather(local).mean().item()
        for key, values in acc.items():  # already gathered across ranks by DPOTrainer
            if values:
                out[f"round/{key}"] = sum(values) / len(values)
        return out

    # -- round checkpoints -------------------------------------------------------------------------------------

    def _round_checkpoint_due(self, steps_before: int, steps_after: int) -> bool:
        strategy = getattr(self.args.save_strategy, "value", self.args.save_strategy)
        if strategy == "no":
            return False
        if strategy == "steps" and self.args.save_steps >= 1:
            every = int(self.args.save_steps)
            return steps_after // every > steps_before // every
        return True  # "epoch", "best", or save_steps given as a fraction: every round

    def _save_round_checkpoint(self, rounds_done: int, trial) -> None:
        """The Trainer's checkpoint of the current state, plus the round counter, round logs and random state."""
        self._save_checkpoint(self.model, trial)
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        os.makedirs(folder, exist_ok=True)
        torch.save(rng_state(), os.path.join(folder, ROUND_RNG_FILE.format(rank=self.accelerator.process_index)))
        if self.accelerator.is_main_process:
            with open(os.path.join(folder, ROUND_STATE_FILE), "w") as f:
                json.dump(
                    {
                        "rounds_done": rounds_done,
                        "num_processes": self.accelerator.num_processes,
                        "tokens_seen": dpo_tokens_seen(self),
                        "round_history": self.round_history,
                    },
                    f,
                    indent=1,
                )
        self.accelerator.wait_for_everyone()

    def _load_round_checkpoint(self, checkpoint: str) -> int:
        """Restore what a round checkpoint holds; return the index of the next round to run."""
        where = f"EnvDPOTrainer: resume_from_checkpoint={checkpoint!r}"
        state_path = os.path.join(checkpoint, ROUND_STATE_FILE)
        if not os.path.isfile(state_path):
            raise ValueError(
                f"{where} is not a checkpoint of env-driven DPO (it has no {ROUND_STATE_FILE}); env-driven "
                "DPO writes its checkpoints at the end of rounds (see save_strategy in docs/dpo.md)"
            )
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            raise ValueError(
                f"{where}: resuming env-driven DPO under DeepSpeed or FSDP is not supported; resume "
                "without them, or start a new run from the checkpoint's weights"
            )
        with open(state_path) as f:
            saved = json.load(f)
        if saved["num_processes"] != self.accelerator.num_processes:
            raise ValueError(
                f"{where} was written by {saved['num_processes']} processes, this run has "
                f"{self.accelerator.num_processes}; each process's rollouts continue from its own random "
                "state, so resume with the same number of processes"
            )
        optimizer_path = os.path.join(checkpoint, "optimizer.pt")
        if not os.path.isfile(optimizer_path):
            raise ValueError(
                f"{where} holds no optimizer state (written with save_only_model=True?); the run cannot "
                "continue exactly without it"
            )
        self._load_from_checkpoint(checkpoint)
        self.state = TrainerState.load_from_json(os.path.join(checkpoint, "trainer_state.json"))
        self.round_history = saved["round_history"]
        set_dpo_tokens_seen(self, saved["tokens_seen"])
        self._resume_optimizer_state = torch.load(optimizer_path, map_location="cpu", weights_only=True)
        rng_path = os.path.join(checkpoint, ROUND_RNG_FILE.format(rank=self.accelerator.process_index))
        set_rng_state(torch.load(rng_path, weights_only=False))  # our own file: Python / NumPy states are tuples
        return saved["rounds_done"]

    def create_optimizer(self, model=None):
        """``Trainer.create_optimizer``; on the first round after a resume, with the checkpoint's optimizer state
        (loaded before the round's scheduler is made, as the optimizer carried over between rounds would be)."""
        optimizer = super().create_optimizer(model)
        if self._resume_optimizer_state is not None:
            optimizer.load_state_dict(self._resume_optimizer_state)
            self._resume_optimizer_state = None
        return optimizer

    def _init_training_state(self, max_steps, *args, **kwargs):
        """``Trainer`` makes a fresh ``TrainerState`` per ``train()`` call; between rounds, keep counting."""
        previous = self.state
        result = super()._init_training_state(max_steps, *args, **kwargs)
        if self._in_rounds:
            self.state.global_step = previous.global_step
            self.state.max_steps = previous.global_step + max_steps  # the stop test compares global_step to it
            self.state.log_history = previous.log_history
            self.state.total_flos = previous.total_flos
            self.state.num_input_tokens_seen = previous.num_input_tokens_seen
        return result

    def _finalize_training(self, trial, num_train_samples, start_time):
        if not self._in_rounds:
            return super()._finalize_training(trial, num_train_samples, start_time)
        # speed metrics scale by the share of max_steps run in this call: use the round's own step count
        total = self.state.max_steps
        self.state.max_steps = total - self._round_step_offset
        try:
            return super()._finalize_training(trial, num_train_samples, start_time)
        finally:
            self.state.max_steps = total

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        if self._round_acc is not None and self.model.training:
            self._round_acc["loss"].append((out[0] if return_outputs else out).detach())
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self._round_acc is not None and self.model.training:
            for key in ("rewards/margins", "rewards/accuracies", "rewards/chosen", "rewards/rejected"):
                self._round_acc[key].extend(trl_seam.logged_metrics(self, "train").get(key, []))
        super().log(logs, start_time)

    # -- rollouts ----------------------------------------------------------------------------------------------

    def _sample_pairs(self, round_index: int) -> tuple[list[dict[str, Any]], PairStats, dict[str, float]]:
        """Roll out this round's groups (shared out over ranks), pair them, and gather pairs and metrics to every
        rank (all ranks then train on the same pair dataset, which the Trainer shards)."""
        args: EnvDPOConfig = self.args
        n = len(self._train_envs)
        builders = [
            b
            for k in range(args.batches_per_round)
            for b in self._train_envs.get_batch((round_index * args.batches_per_round + k) % n)
        ]
        result = self._rollout(builders)
        self.last_rollout = result
        pairs, stats = make_preference_pairs(result.groups, min_reward_gap=args.min_reward_gap)
        rows = [p.as_row() for p in pairs]
        metrics = rollout_metrics(result.groups, result.error_counts)
        if self.accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            gathered = gather_object([(rows, stats, metrics)])
            rows = [row for part in gathered for row in part[0]]
            stats = functools.reduce(lambda a, b: a + b, (part[1] for part in gathered))
            metrics = _merge_metrics(part[2] for part in gathered)
        return rows, stats, summarize(metrics)

    def _evaluate_envs(self) -> dict[str, float]:
        builders = [b for i in range(len(self._eval_envs)) for b in self._eval_envs.get_batch(i)]
        result = self._rollout(builders)
        metrics = rollout_metrics(result.groups, result.error_counts, prefix="eval_env")
        if self.accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            metrics = _merge_metrics(gather_object([metrics]))
        return summarize(metrics)

    def _rollout(self, builders: Sequence[EnvGroupBuilder]) -> RolloutBatchResult:
        """This rank's share of ``builders`` (every ``num_processes``-th), rolled out with one batched generation call
        per turn; every rank makes the same number of calls (they can be collectives under ZeRO-3 / FSDP)."""
        local = list(builders)[self.accelerator.process_index :: self.accelerator.num_processes]
        return self._rollout_groups(local)

    # -- logging -----------------------------------------------------------------------------------------------

    def _log_and_print(self, logs: dict[str, float], round_index: int) -> None:
        self.log(dict(logs))
        if round_index > 0:
            self.round_history.append(dict(logs))
        if self.accelerator.is_main_process:
            print(_round_line(logs, round_index, self.args.num_rounds), flush=True)


class _NoCheckpointsInsideRounds(TrainerCallback):
    """Env-driven DPO: the Trainer's saves inside a round are dropped (a checkpoint there could not be resumed
    exactly: the round's pairs came from the round's starting weights); rounds are checkpointed at their end."""

    def on_step_end(self, args, state, control, **kwargs):
        control.should_save = False
        return control

    on_epoch_end = on_step_end


def _round_line(logs: dict[str, float], round_index: int, num_rounds: int) -> str:
    parts = [f"[trl_envs] round {round_index:>2}/{num_rounds}"]
    if "env/all/reward/total" in logs:
        parts.append(f"env reward {logs['env/all/reward/total']:.3f}")
    if "pairs/pairs" in logs:
        parts.append(f"pairs {logs['pairs/pairs']:.0f}/{logs['pairs/groups']:.0f} (ties {logs['pairs/ties']:.0f})")
    for label, key, fmt in (
        ("loss", "round/loss", ".4f"),
        ("margin", "round/rewards/margins", "+.4f"),
        ("acc", "round/rewards/accuracies", ".2f"),
        ("eval reward", "eval_env/all/reward/total", ".3f"),
    ):
        if key in logs and not (isinstance(logs[key], float) and math.isnan(logs[key])):
            parts.append(f"{label} {logs[key]:{fmt}}")
    if "round/seconds" in logs:
        parts.append(f"{logs['round/seconds']:.1f} s")
    return " | ".join(parts)


def _merge_metrics(parts) -> dict[str, list[float]]:
    merged: dict[str, list[float]] = defaultdict(list)
    for part in parts:
        for name, values in part.items():
            merged[name].extend(values)
    return dict(merged)


def _placeholder_pairs() -> Dataset:
    """One dummy pre-tokenized pair: ``DPOTrainer.__init__`` needs a dataset; env mode replaces it every round before
    any training step."""
    return Dataset.from_dict(
        {"prompt_ids": [[0]], "chosen_ids": [[0]], "rejected_ids": [[0]], "chosen_mask": [[1]], "rejected_mask": [[1]]}
    )


def _in_memory_reference(model, args, peft_config):
    """A frozen copy of an in-memory model to serve as the reference (TRL would reload ``config._name_or_path``, which
    is empty for a model built in memory and stale for one changed since it was loaded). ``None`` where TRL's own
    default is right: a model given by id/path, PEFT (adapter off), or precomputed reference log-probs."""
    return None if args.precompute_ref_log_probs else frozen_reference_copy(model, peft_config)


def _is_vision(dataset) -> bool:
    first = next(iter(dataset), None) or {}
    return "image" in first or "images" in first


def _columns(dataset, first: dict[str, Any]) -> list[str]:
    names = getattr(dataset, "column_names", None)
    return list(names) if names else list(first.keys())


def _check_columns(dataset, first: dict[str, Any], name: str) -> None:
    found = _columns(dataset, first)
    missing = [c for c in ("chosen", "rejected") if c not in found]
    if missing:
        raise ValueError(
            f"EnvDPOTrainer: the {name} preference dataset has no {' and no '.join(repr(c) for c in missing)} column. "
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
        f"EnvDPOTrainer: row {index} of the {name} dataset has an empty {column!r} answer; DPO needs a "
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

    def check(example):  # IterableDataset: checked lazily, as rows are read
        for column in ("chosen", "rejected"):
            if _is_empty(example[column]):
                raise _empty_error(name, "(streamed)", column)
        return example

    return dataset.map(check)


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
            f"EnvDPOTrainer: in every one of the {len(dataset)} rows of the {name} dataset {chosen!r} "
            f"equals {rejected!r}; DPO needs pairs whose answers differ"
        )
    warnings.warn(
        f"EnvDPOTrainer: dropped {len(same)} of {len(dataset)} rows of the {name} dataset whose {chosen!r} "
        f"equals {rejected!r} (first: row {same[0]}); DPO learns nothing from them",
        stacklevel=3,
    )
    keep = set(same)
    return dataset.select([i for i in range(len(dataset)) if i not in keep])


def _check_tokenized(dataset, name: str) -> None:
    if not isinstance(dataset, Dataset):
        return
    columns = dataset.column_names
    for column in ("chosen_ids", "rejected_ids"):
        for i, ids in enumerate(dataset[column]):
            if not ids:
                raise _empty_error(name, i, column)
    for side in ("chosen", "rejected"):
        if f"{side}_mask" in columns:
            for i, (ids, mask) in enumerate(zip(dataset[f"{side}_ids"], dataset[f"{side}_mask"])):
                if mask is not None and len(mask) != len(ids):
                    raise ValueError(
                        f"EnvDPOTrainer: row {i} of the {name} dataset has {len(ids)} {side}_ids but "
                        f"{len(mask)} {side}_mask values; the mask needs one value per token"
                    )


__all__ = ["DataCollatorForMaskedPreference", "EmptyPairsWarning", "EnvDPOTrainer", "PAIR_COLUMNS"]
