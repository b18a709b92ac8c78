"""Env-driven (iterative) DPO: the loop over rounds of *sample pairs with the current policy → train DPO on them*.

:class:`DPORounds` drives one :class:`~trl_envs.trainers.dpo.EnvDPOTrainer` (``EnvDPOTrainer.train()`` hands over to it
when the trainer was given envs). Each round:

1. rolls out ``batches_per_round`` batches of env groups (shared out over ranks) from the trainer's rollout source,
   pairs them (:meth:`~trl_envs.training_data.pairs_step.PairsStep.from_rollout`) and gathers the pairs to every rank;
2. trains on them with one ``Trainer.train`` call over the trainer's own optimizer, collator and loss
   (:meth:`~trl_envs.trainers.dpo.EnvDPOTrainer.train_round`). The
   ``TrainerState`` keeps counting across rounds (``global_step``, ``log_history``, FLOPs, tokens: loggers see one
   run); ``num_train_epochs`` / ``max_steps`` and the learning-rate schedule (rebuilt by ``Trainer``) are per round;
   the optimizer and its moments carry over; the reference model stays the initial policy;
3. plays the evaluation envs (``eval_envs_each_round``), logs one entry and prints one line;
4. writes a round checkpoint when ``save_strategy`` asks for one (``"steps"``: the round crossed a multiple of
   ``save_steps``; ``"epoch"`` / ``"best"``: every round): the ``Trainer`` saves at the round's last training step
   and at no other (a round's pairs come from the weights at its start, so only a round's end can be resumed
   exactly), and the round completes that checkpoint once it has logged.

A round checkpoint is the ``Trainer``'s (weights, optimizer, scheduler, ``trainer_state.json``) plus
:data:`ROUND_STATE_FILE` (rounds done, their logs, the DPO token count) and every process's random state
(:data:`ROUND_RNG_FILE`). Resuming from it restores all of that and continues with the next round, which samples the
same batches with the same weights and random state, so the run goes on exactly as if it had not stopped (same number
of processes; not under DeepSpeed / FSDP).
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
import warnings
from collections import defaultdict
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainerCallback, TrainerState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, TrainOutput, load_sharded_checkpoint
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from ..core.types import RLDataset
from ..rollout.metrics import rollout_metrics, summarize
from ..training_data.pairs_step import PairsStep
from ..training_data.preference import PairStats
from .resume import rng_state, set_rng_state
from .rollouts import RolloutSource

ROUND_STATE_FILE = "env_dpo_rounds.json"
"""In a round checkpoint: the rounds done, their logged values and the DPO token count."""
ROUND_RNG_FILE = "env_dpo_rng_{rank}.pt"
"""In a round checkpoint: each process's random state at the end of the round."""
TRAINER_STATE_NAME = "trainer_state.json"
ROUND_METRICS = ("rewards/margins", "rewards/accuracies", "rewards/chosen", "rewards/rejected")


class EmptyPairsWarning(UserWarning):
    """A round of env-driven DPO produced no preference pair (every group tied, or was skipped)."""


class DPORounds:
    """The rounds of env-driven DPO on ``trainer`` (an ``EnvDPOTrainer`` whose ``args`` is an ``EnvDPOConfig``), its
    training rollouts taken from ``source`` (evaluation envs are played with ``source.rollouts``, unrecorded).

    Attributes:
        history: one dict per finished round, the values logged for it.
        last_pair_stats: the :class:`PairStats` of the latest round (all ranks).
    """

    def __init__(self, trainer, source: RolloutSource, train_envs: RLDataset, eval_envs: RLDataset | None):
        self.trainer, self.source, self.train_envs, self.eval_envs = trainer, source, train_envs, eval_envs
        self.history: list[dict[str, float]] = []
        self.last_pair_stats: PairStats | None = None
        self.round_start_step: int | None = None  # the global step a round's training started at, while it trains
        trainer.add_callback(_SaveAtRoundEnd(self))

    def run(self, checkpoint: str | None = None, trial=None, ignore_keys_for_eval=None) -> TrainOutput:
        """Every round from the first (or, with ``checkpoint``, from the one after it); returns the last global step,
        the mean of the rounds' losses and the last round's logs."""
        trainer, args = self.trainer, self.trainer.args
        first_round = self._load(checkpoint) if checkpoint is not None else 0
        trainer.run_guards.marker.deferred = True  # a round checkpoint is complete once the round's files are in
        losses: list[float] = []
        last: dict[str, float] = {}
        if self.eval_envs is not None and args.eval_envs_each_round and first_round == 0:
            self._log_round({"round": 0.0, **self.evaluate_envs()}, 0)
        for r in range(first_round, args.num_rounds):
            start, steps_before = time.perf_counter(), trainer.state.global_step
            rows, stats, env_logs = self.sample_pairs(r)
            self.last_pair_stats = stats
            logs: dict[str, float] = {"round": float(r + 1), **env_logs, **stats.as_metrics()}
            if args.max_length is not None and args.truncation_mode == "keep_start":  # as TRL: nothing left to train
                kept = [row for row in rows if len(row["prompt_ids"]) < args.max_length]
                if len(kept) < len(rows):
                    logs["pairs/too_long"] = float(len(rows) - len(kept))
                rows = kept
            if rows:
                logs.update(self.train_round(Dataset.from_list(rows), trial, ignore_keys_for_eval))
                losses.append(logs["round/loss"])
            else:
                if r == first_round and 0 < stats.num_groups == stats.prompt_mismatch:
                    raise ValueError(no_pairs_possible(self.train_envs, stats))
                message = no_pairs_message(r + 1, stats, int(logs.get("pairs/too_long", 0)))
                warnings.warn(message, EmptyPairsWarning, stacklevel=3)
            if self.eval_envs is not None and args.eval_envs_each_round:
                logs.update(self.evaluate_envs())
            logs["round/seconds"] = time.perf_counter() - start
            self._log_round(logs, r + 1)
            last = logs
            if self._checkpoint_due(steps_before, trainer.state.global_step):
                self._save_round_checkpoint(r + 1)
        train_loss = sum(losses) / len(losses) if losses else float("nan")
        return TrainOutput(trainer.state.global_step, train_loss, {"train_loss": train_loss, **last})

    # -- one round ---------------------------------------------------------------------------------------------

    def sample_pairs(self, round_index: int) -> tuple[list[dict[str, Any]], PairStats, dict[str, float]]:
        """Roll out round ``round_index``'s groups (every ``num_processes``-th on this rank), pair them, and gather the
        pair rows, their counts and the env metrics to every rank (all ranks then train on the same pairs, which the
        Trainer shards)."""
        trainer, args = self.trainer, self.trainer.args
        n = len(self.train_envs)
        builders = [
            b
            for k in range(args.batches_per_round)
            for b in self.train_envs.get_batch((round_index * args.batches_per_round + k) % n)
        ]
        local = builders[trainer.accelerator.process_index :: trainer.accelerator.num_processes]
        rollout = self.source.rollout(local)
        pairs, stats, _ = PairsStep.from_rollout(rollout, min_reward_gap=args.min_reward_gap)
        rows = [p.as_row() for p in pairs]
        metrics = rollout_metrics(rollout.groups, rollout.error_counts)
        if trainer.accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            gathered = gather_object([(rows, stats, metrics)])
            rows = [row for part in gathered for row in part[0]]
            stats = functools.reduce(lambda a, b: a + b, (part[1] for part in gathered))
            metrics = _merge_metrics(part[2] for part in gathered)
        return rows, stats, summarize(metrics)

    def train_round(self, pairs: Dataset, trial=None, ignore_keys_for_eval=None) -> dict[str, float]:
        """One ``Trainer.train`` call on ``pairs``, continuing the run's state; returns the round's ``round/...`` logs:
        its steps, its mean loss and the mean of each DPO reward metric over its training steps (all ranks)."""
        trainer = self.trainer
        steps_before = self.round_start_step = trainer.state.global_step
        collected = _RoundMetrics(trainer)
        trainer.add_callback(collected)
        try:
            out = trainer.train_round(pairs, trial, ignore_keys_for_eval)
        finally:
            trainer.remove_callback(collected)
            self.round_start_step = None
        logs = {"round/steps": float(trainer.state.global_step - steps_before)}
        if logs["round/steps"]:
            loss = torch.tensor([out.training_loss], device=trainer.accelerator.device)
            logs["round/loss"] = trainer.accelerator.gather(loss).mean().item()
        for key, value in collected.means().items():  # already gathered across ranks by DPOTrainer
            logs[f"round/{key}"] = value
        return logs

    def evaluate_envs(self) -> dict[str, float]:
        """Play every batch of the evaluation envs (shared out over ranks) with the current policy: ``eval_env/...``."""
        trainer = self.trainer
        builders = [b for i in range(len(self.eval_envs)) for b in self.eval_envs.get_batch(i)]
        local = builders[trainer.accelerator.process_index :: trainer.accelerator.num_processes]
        result = self.source.rollouts.rollout(local)
        metrics = rollout_metrics(result.groups, result.error_counts, prefix="eval_env")
        if trainer.accelerator.num_processes > 1:
            from accelerate.utils import gather_object

            metrics = _merge_metrics(gather_object([metrics]))
        return summarize(metrics)

    def _log_round(self, logs: dict[str, float], round_index: int) -> None:
        self.trainer.log(dict(logs))
        if round_index > 0:
            self.history.append(dict(logs))
        if self.trainer.accelerator.is_main_process:
            print(round_line(logs, round_index, self.trainer.args.num_rounds), flush=True)

    # -- round checkpoints -------------------------------------------------------------------------------------

    def _checkpoint_due(self, steps_before: int, steps_after: int) -> bool:
        args = self.trainer.args
        strategy = getattr(args.save_strategy, "value", args.save_strategy)
        if strategy == "no":
            return False
        if strategy == "steps" and args.save_steps >= 1:
            every = int(args.save_steps)
            return steps_after // every > steps_before // every
        return True  # "epoch", "best", or save_steps given as a fraction: every round

    def _save_round_checkpoint(self, rounds_done: int) -> None:
        """Complete the checkpoint the Trainer wrote at the round's last step (weights, optimizer, scheduler; see
        :class:`_SaveAtRoundEnd`) with the state at the round's end: ``trainer_state.json`` again (the round's logs
        included), :data:`ROUND_STATE_FILE`, every process's random state; then mark it complete. A round that
        trained nothing completes the checkpoint of the same step, written by an earlier round (none before the
        first training step: there is nothing to resume then)."""
        trainer = self.trainer
        folder = os.path.join(trainer.args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")
        if not os.path.isdir(folder):
            return
        marker = trainer.run_guards.marker
        marker.writing = folder
        torch.save(rng_state(), os.path.join(folder, ROUND_RNG_FILE.format(rank=trainer.accelerator.process_index)))
        trainer.accelerator.wait_for_everyone()
        if trainer.accelerator.is_main_process:
            trainer.state.save_to_json(os.path.join(folder, TRAINER_STATE_NAME))
            with open(os.path.join(folder, ROUND_STATE_FILE), "w") as f:
                state = {
                    "rounds_done": rounds_done,
                    "num_processes": trainer.accelerator.num_processes,
                    "tokens_seen": trainer.tokens_seen(),
                    "round_history": self.history,
                }
                json.dump(state, f, indent=1)
            marker.mark(folder, trainer.state.global_step)
        marker.writing = None
        trainer.accelerator.wait_for_everyone()

    def _load(self, checkpoint: str) -> int:
        """Restore what a round checkpoint holds (weights, optimizer moments, ``TrainerState``, round logs, token
        count, random state); return the index of the next round to run."""
        trainer = self.trainer
        where = f"EnvDPOTrainer: resume_from_checkpoint={checkpoint!r}"
        state_path = os.path.join(checkpoint, ROUND_STATE_FILE)
        if not os.path.isfile(state_path):
            raise ValueError(
                f"{where} is not a checkpoint of env-driven DPO (it has no {ROUND_STATE_FILE}); env-driven "
                "DPO writes its checkpoints at the end of rounds (see save_strategy in docs/dpo.md)"
            )
        if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
            raise ValueError(
                f"{where}: resuming env-driven DPO under DeepSpeed or FSDP is not supported; resume "
                "without them, or start a new run from the checkpoint's weights"
            )
        with open(state_path) as f:
            saved = json.load(f)
        if saved["num_processes"] != trainer.accelerator.num_processes:
            raise ValueError(
                f"{where} was written by {saved['num_processes']} processes, this run has "
                f"{trainer.accelerator.num_processes}; each process's rollouts continue from its own random "
                "state, so resume with the same number of processes"
            )
        optimizer_path = os.path.join(checkpoint, "optimizer.pt")
        if not os.path.isfile(optimizer_path):
            raise ValueError(
                f"{where} holds no optimizer state (written with save_only_model=True?); the run cannot "
                "continue exactly without it"
            )
        load_weights(trainer.model, checkpoint)
        trainer.state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))
        self.history = saved["round_history"]
        trainer.tokens_before_resume = saved["tokens_seen"]
        # the optimizer the rounds carry over, made now with the checkpoint's moments (its scheduler is per round)
        trainer.create_optimizer().load_state_dict(torch.load(optimizer_path, map_location="cpu", weights_only=True))
        rng_path = os.path.join(checkpoint, ROUND_RNG_FILE.format(rank=trainer.accelerator.process_index))
        set_rng_state(torch.load(rng_path, weights_only=False))  # our own file: Python / NumPy states are tuples
        return saved["rounds_done"]


class _RoundMetrics(TrainerCallback):
    """Collects the DPO reward metrics of a round's training logs, each weighted by the training steps it covers.
    ``DPOTrainer.log`` logs the mean of each metric over the batches since the previous log, so the weighted mean
    over a round weighs each training batch the same."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.values: dict[str, list[tuple[float, int]]] = defaultdict(list)
        self.last_step = trainer.state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self.trainer.model.training or not logs:
            return
        steps, self.last_step = state.global_step - self.last_step, state.global_step
        for key in ROUND_METRICS:
            if key in logs:
                self.values[key].append((float(logs[key]), max(steps, 1)))

    def means(self) -> dict[str, float]:
        """Each metric's mean over the round's training batches."""
        return {
            key: sum(v * n for v, n in pairs) / sum(n for _, n in pairs) for key, pairs in self.values.items() if pairs
        }


class _SaveAtRoundEnd(TrainerCallback):
    """The Trainer saves a checkpoint at the last training step of a round when the round's checkpoint is due, and at
    no other step: a round's pairs come from the weights at its start, so only a round's end can be resumed exactly.
    :meth:`DPORounds._save_round_checkpoint` completes it after the round."""

    def __init__(self, rounds: DPORounds):
        self.rounds = rounds

    def on_step_end(self, args, state, control, **kwargs):
        start = self.rounds.round_start_step
        last = state.global_step >= state.max_steps or control.should_training_stop
        control.should_save = start is not None and last and self.rounds._checkpoint_due(start, state.global_step)
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        control.should_save = False  # saved at the round's last step already, if due
        return control


def load_weights(model, checkpoint: str) -> None:
    """Load the weights of ``checkpoint`` into ``model`` in place, as ``Trainer.train(resume_from_checkpoint=...)``
    does: a PEFT model's adapter, or the full model (one safetensors file or shards; weights tied to a loaded one
    are not saved and need no loading). Raises ``ValueError`` naming the checkpoint when it does not fit."""
    where = f"EnvDPOTrainer: resume_from_checkpoint={checkpoint!r}"
    if hasattr(model, "peft_config"):
        model.load_adapter(checkpoint, model.active_adapter, is_trainable=True)
        return
    single = os.path.join(checkpoint, SAFE_WEIGHTS_NAME)
    if os.path.isfile(single):
        from safetensors.torch import load_file

        result = model.load_state_dict(load_file(single, device="cpu"), strict=False)
    elif os.path.isfile(os.path.join(checkpoint, SAFE_WEIGHTS_INDEX_NAME)):
        result = load_sharded_checkpoint(model, checkpoint, strict=False)
    else:
        raise ValueError(f"{where} holds no {SAFE_WEIGHTS_NAME} or {SAFE_WEIGHTS_INDEX_NAME}")
    state = model.state_dict()
    loaded = {state[k].data_ptr() for k in state if k not in set(result.missing_keys)}
    missing = [k for k in result.missing_keys if state[k].data_ptr() not in loaded]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"{where} does not fit the model: missing {missing[:5]}, unexpected {list(result.unexpected_keys)[:5]}"
        )


def round_line(logs: dict[str, float], round_index: int, num_rounds: int) -> str:
    """The line printed for a round: env reward, pairs, loss, margin, accuracy, evaluation reward, seconds."""
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


def no_pairs_possible(envs: RLDataset, stats: PairStats) -> str:
    """The error of env-driven DPO on envs whose groups can never pair: every trajectory of a group began from
    another prompt (self-play: each env plays another seat)."""
    try:
        name = envs.get_batch(0)[0].logging_tags()[0]  # the env's name, as the logs tag it
    except Exception:  # noqa: BLE001 - only for the message
        name = None
    return (
        f"EnvDPOTrainer: no env group of the first round can make a preference pair: in all {stats.num_groups} the "
        "trajectories began from different prompts (self-play, where each env of a group plays another seat, or a "
        "group of different problems), and DPO compares two answers to one prompt. Train such envs with GRPO "
        f"(trl-envs grpo{f' --env {name}' if name else ''}), or give DPO groups whose envs all start alike (a game "
        "against a fixed opponent)"
    )


def no_pairs_message(round_number: int, stats: PairStats, too_long: int) -> str:
    """The warning of a round that made no pair: the counts per cause, and what would make pairs for the main one."""
    counts = (
        f"{stats.ties} all ties, {stats.skipped} skipped after errors, {stats.prompt_mismatch} with different prompts, "
        f"{stats.too_small} with < 2 trajectories, {stats.identical} identical, {too_long} longer than max_length"
    )
    if stats.num_groups and stats.ties == stats.num_groups:
        advice = (
            "every group's trajectories got the same total reward (a reward that is constant within a group never "
            "pairs): more envs per group (group_size), a higher temperature, or a finer-grained reward give pairs"
        )
    elif stats.prompt_mismatch:
        advice = "DPO pairs trajectories that began from the same prompt: give groups whose envs all start alike"
    elif too_long:
        advice = "raise max_length, or shorten the envs' prompts"
    else:
        advice = "more envs per group, a higher temperature, or a finer-grained reward give more pairs"
    return (
        f"EnvDPOTrainer: round {round_number} made no preference pair from {stats.num_groups} env groups ({counts}); "
        f"no training this round. {advice[0].upper()}{advice[1:]}."
    )


__all__ = ["DPORounds", "EmptyPairsWarning", "ROUND_RNG_FILE", "ROUND_STATE_FILE", "round_line"]
