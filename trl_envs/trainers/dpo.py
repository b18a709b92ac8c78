"""``EnvDPOTrainer``: TRL's ``DPOTrainer`` on preference datasets, and iterative DPO driven by environments.

* **Offline DPO** (``train_dataset``): TRL's ``DPOTrainer`` on ``prompt`` / ``chosen`` / ``rejected`` rows (text or chat
  messages), after the checks of :mod:`~trl_envs.training_data.preference_checks`; pre-tokenized pairs
  (``prompt_ids`` / ``chosen_ids`` / ``rejected_ids``, optional ``chosen_mask`` / ``rejected_mask``) are used as is.
* **Env-driven DPO** (``env_dataset``): rounds of *sample pairs with the current policy → train DPO on them*, driven by
  :class:`~trl_envs.trainers.dpo_rounds.DPORounds`. Multi-turn pairs keep env tokens out of the loss
  (:class:`~trl_envs.trainers.preference_collator.DataCollatorForMaskedPreference`).

See docs/dpo.md.
"""

from __future__ import annotations

from datasets import Dataset, IterableDataset
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, PreTrainedTokenizerBase, Trainer
from transformers.trainer_utils import TrainOutput
from trl import DPOConfig, DPOTrainer

from ..core.types import RLDataset, RLDatasetBuilder
from ..registry.names import env_label as named_env
from ..rollout.engine import RolloutBatchResult
from ..samplers.base import Sampler
from ..training_data.preference import PAIR_COLUMNS, PairStats
from ..training_data.preference_checks import (
    check_raw_preferences,
    check_tokenized_pairs,
    first_row,
    is_tokenized,
)
from . import trl_seam
from .dpo_config import EnvDPOConfig
from .dpo_rounds import DPORounds, EmptyPairsWarning
from .env_setup import check_env_launch, frozen_reference, load_env_datasets, text_tokenizer
from .preference_collator import DataCollatorForMaskedPreference
from .rollouts import EnvRollouts, SyncRolloutSource
from .run_guards import RunGuards

MODEL_TAG = "trl_envs"
"""The tag EnvDPOTrainer adds to the model and its model card, beside TRL's ``trl`` and ``dpo``."""


class _ResumedTokenCount(Trainer):
    """The ``num_tokens`` DPOTrainer logs (its running count of training tokens, which a checkpoint does not hold) goes
    on from the count of the checkpoint a run resumed from. A base of EnvDPOTrainer after DPOTrainer:
    ``DPOTrainer.log`` adds its metrics to ``logs`` and hands them on to this ``log``, on their way to
    ``Trainer.log`` (the log history, then the loggers)."""

    tokens_before_resume: int = 0

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.tokens_before_resume and "num_tokens" in logs:
            logs["num_tokens"] += self.tokens_before_resume
        super().log(logs, start_time)

    def tokens_seen(self) -> int:
        """The latest ``num_tokens`` logged (0 before any)."""
        logged = (h["num_tokens"] for h in reversed(self.state.log_history) if "num_tokens" in h)
        return int(next(logged, 0))


class EnvDPOTrainer(DPOTrainer, _ResumedTokenCount):
    """DPO on a preference dataset, or on pairs sampled from environments in rounds (see the module docstring).

    Args:
        model: model id, path, ``PreTrainedModel`` or ``PeftModel``.
        ref_model: the reference policy. Default: the model as passed (see
            :func:`~trl_envs.trainers.env_setup.frozen_reference`; with ``peft_config``, the adapter switched off).
        args: :class:`~trl_envs.trainers.dpo_config.EnvDPOConfig` (a plain ``DPOConfig`` works for offline DPO).
        data_collator: default :class:`DataCollatorForMaskedPreference`.
        train_dataset: the preference dataset (offline DPO). Exactly one of ``train_dataset`` and ``env_dataset``.
        eval_dataset: preference data to evaluate the DPO loss and rewards on (as in TRL).
        processing_class: the tokenizer (default: loaded from the model). With envs it must be the tokenizer of the
            envs' renderer.
        env_dataset: env-driven DPO on an :class:`RLDataset`, an :class:`RLDatasetBuilder` (its test split becomes the
            evaluation envs unless ``eval_env_dataset`` is given) or a ``datasets.Dataset`` of env rows (groups of
            ``args.group_size``, ``args.groups_per_round`` groups per batch).
        eval_env_dataset: envs played before the first round and after each round (``args.eval_envs_each_round``),
            logged as ``eval_env/...``.
        sampler: a :class:`~trl_envs.samplers.base.Sampler` to roll out with instead of the policy itself.
        compute_metrics, callbacks, optimizers, quantization_config, peft_config: as in ``DPOTrainer``.

    Attributes:
        rounds: the :class:`~trl_envs.trainers.dpo_rounds.DPORounds` of env-driven DPO (``None`` offline).
        reference_model: the reference model as given to ``DPOTrainer`` (``None``: the policy before training, or
            the PEFT model with its adapter switched off).
        rollouts: the trainer's :class:`~trl_envs.trainers.rollouts.EnvRollouts` (the sampler, budgets, error
            strategy) that the rounds roll out with.
        run_guards: the :class:`~trl_envs.trainers.run_guards.RunGuards` of ``train()``.
        round_history: one dict per finished round, the values logged for it (empty offline).
        last_pair_stats: the :class:`PairStats` of the latest round (all ranks).
        last_rollout: this rank's latest training rollout.

    Raises:
        ValueError: no dataset or both kinds; ``precompute_ref_log_probs`` with envs; a preference dataset that fails
            a check of :mod:`~trl_envs.training_data.preference_checks` (the row and column are named).
        TypeError: envs with a config that is not an ``EnvDPOConfig``, or an ``env_dataset`` of another type.
    """

    rounds: DPORounds | None = None

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
        env_dataset: RLDataset | RLDatasetBuilder | Dataset | None = None,
        eval_env_dataset: RLDataset | Dataset | None = None,
        sampler: Sampler | None = None,
    ):
        trl_seam.check_trl_compatibility(trainer="dpo")  # an incompatible TRL fails here, not in a training step
        self.rollouts = EnvRollouts(self, sampler)
        if (train_dataset is None) == (env_dataset is None):
            raise ValueError(
                "EnvDPOTrainer: give exactly one of train_dataset (a preference dataset: offline DPO) "
                "and env_dataset (an RLDataset, RLDatasetBuilder or Dataset of env rows: env-driven DPO)"
            )
        if args is None:
            name = model if isinstance(model, str) else getattr(model.config, "name_or_path", "") or "model"
            args = EnvDPOConfig(output_dir=f"{name.rstrip('/').split('/')[-1]}-DPO")
        if processing_class is None:
            path = model if isinstance(model, str) else getattr(model.config, "name_or_path", "")
            processing_class = AutoTokenizer.from_pretrained(path)
        envs = None
        if env_dataset is not None:
            _check_env_config(args)
            train_envs, eval_envs, processing_class = load_env_datasets(
                env_dataset,
                eval_env_dataset,
                owner="EnvDPOTrainer",
                model=model,
                processing_class=processing_class,
                group_size=args.group_size,
                eval_group_size=args.group_size,
                groups_per_batch=args.groups_per_round,
                seed=args.seed,
            )
            envs = (train_envs, eval_envs)
            train_dataset = _STAND_IN  # DPOTrainer needs a dataset now; each round trains on its own
        tokenizer = text_tokenizer(processing_class)
        if isinstance(tokenizer, PreTrainedTokenizerBase) and tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        vision = _is_vision(train_dataset)
        if data_collator is None and not vision:
            data_collator = DataCollatorForMaskedPreference(
                pad_token_id=tokenizer.pad_token_id,
                max_length=args.max_length,
                truncation_mode=args.truncation_mode,
                pad_to_multiple_of=args.pad_to_multiple_of,
            )
            args.remove_unused_columns = False  # the collator takes its own columns, the masks among them
        # TRL tokenizes raw preference data in __init__; pre-tokenized pairs are checked here, TRL gets a stand-in
        tokenized = {}
        if not vision:
            train_dataset, tokenized["train"] = _checked(train_dataset, "train", tokenizer, args)
            if isinstance(eval_dataset, dict):
                eval_dataset = dict(eval_dataset)
                for name in list(eval_dataset):
                    eval_dataset[name], tokenized[("eval", name)] = _checked(eval_dataset[name], name, tokenizer, args)
            elif eval_dataset is not None:
                eval_dataset, tokenized["eval"] = _checked(eval_dataset, "eval", tokenizer, args)
        if ref_model is None:
            ref_model = frozen_reference(model, peft_config, needed=not args.precompute_ref_log_probs)
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
        self.model.add_model_tags([MODEL_TAG])
        self.reference_model = ref_model  # as given (None: the policy, or the PEFT model with its adapter off)
        for key, pairs in tokenized.items():
            if pairs is None:
                continue
            pairs = self.with_reference_logps(pairs, key if isinstance(key, str) else key[1])
            if key == "train":
                self.train_dataset = pairs
            elif key == "eval":
                self.eval_dataset = pairs
            else:
                self.eval_dataset[key[1]] = pairs
        check_env_launch(self, "EnvDPOTrainer", sampler, chat_template=envs is not None)
        self.rounds = DPORounds(self, SyncRolloutSource(self.rollouts), *envs) if envs is not None else None
        self.run_guards = RunGuards(self, model, named_env(env_dataset) if envs is not None else None)

    @property
    def last_rollout(self) -> RolloutBatchResult | None:
        """This rank's latest training rollout (the pairs of the latest round were made from it)."""
        return self.rollouts.last_rollout

    @property
    def round_history(self) -> list[dict[str, float]]:
        return self.rounds.history if self.rounds is not None else []

    @property
    def last_pair_stats(self) -> PairStats | None:
        return self.rounds.last_pair_stats if self.rounds is not None else None

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None, **kwargs) -> TrainOutput:
        """Offline: ``DPOTrainer.train``. With envs: ``args.num_rounds`` rounds (:meth:`DPORounds.run`).
        ``resume_from_checkpoint`` (a folder, or ``True`` / ``"last"`` for the newest complete one) is checked first
        (see :mod:`~trl_envs.trainers.checkpoints`); ``output_dir``'s lock is held throughout."""
        checkpoint = self.run_guards.checkpoint(resume_from_checkpoint)
        with self.run_guards.running():
            if self.rounds is not None:
                return self.rounds.run(checkpoint, trial, ignore_keys_for_eval)
            return super().train(
                resume_from_checkpoint=checkpoint, trial=trial, ignore_keys_for_eval=ignore_keys_for_eval, **kwargs
            )

    def train_round(self, pairs: Dataset, trial=None, ignore_keys_for_eval=None) -> TrainOutput:
        """One ``DPOTrainer.train`` call on the preference rows ``pairs`` that continues the run: the optimizer and
        its moments carry over (the learning-rate schedule is rebuilt per call), the ``TrainerState`` keeps counting
        (``global_step``, ``log_history``, FLOPs, tokens). What each round of :class:`DPORounds` trains with."""
        from accelerate.optimizer import AcceleratedOptimizer

        self.train_dataset = pairs
        if isinstance(self.optimizer, AcceleratedOptimizer):  # else accelerate wraps the wrapper again
            self.optimizer = self.optimizer.optimizer
        with trl_seam.continued_training_state(self):
            return super().train(trial=trial, ignore_keys_for_eval=ignore_keys_for_eval)

    # -- public methods of DPOTrainer ----------------------------------------------------------------------------

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict[str, float]:
        """``DPOTrainer.evaluate``; a dataset given here is checked first, and pre-tokenized pairs are evaluated as
        they are (with their reference log-probabilities computed first under ``precompute_ref_log_probs``)."""
        if isinstance(eval_dataset, dict):
            metrics = {}
            for name, dataset in eval_dataset.items():
                metrics.update(self.evaluate(dataset, ignore_keys, f"{metric_key_prefix}_{name}"))
            return metrics
        if eval_dataset is None or isinstance(eval_dataset, str) or _is_vision(eval_dataset):
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        eval_dataset, pairs = _checked(eval_dataset, "eval", text_tokenizer(self.processing_class), self.args)
        if pairs is None:
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)
        return Trainer.evaluate(self, self.with_reference_logps(pairs, "eval"), ignore_keys, metric_key_prefix)

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """``DPOTrainer.create_model_card`` with :data:`MODEL_TAG` among the tags."""
        tags = [tags] if isinstance(tags, str) else list(tags or [])
        return super().create_model_card(model_name, dataset_name, [*tags, MODEL_TAG])

    def with_reference_logps(self, pairs, name: str):
        """``pairs`` (pre-tokenized) with the columns ``ref_chosen_logps`` / ``ref_rejected_logps`` of the reference
        policy under ``precompute_ref_log_probs`` (as ``DPOTrainer`` adds them to the data it tokenizes), else as
        they are. Computed with ``DPOTrainer.compute_ref_log_probs`` batch by batch, gathered over processes."""
        if not self.args.precompute_ref_log_probs:
            return pairs
        if self.reference_model is None and self.state.global_step > 0 and not hasattr(self.model, "peft_config"):
            raise ValueError(
                f"EnvDPOTrainer: cannot compute the reference log-probabilities of the {name} dataset after training "
                "has started: with precompute_ref_log_probs=True, full fine-tuning and no ref_model the reference "
                "is not kept. Give the dataset when building the trainer, pass a ref_model, or set "
                "precompute_ref_log_probs=False."
            )
        if not isinstance(pairs, Dataset):
            raise ValueError(
                f"EnvDPOTrainer: precompute_ref_log_probs=True needs a map-style Dataset, the {name} dataset is a "
                f"{type(pairs).__name__}; use a Dataset or set precompute_ref_log_probs=False"
            )
        batch_size = self.args.precompute_ref_batch_size or self.args.per_device_eval_batch_size
        loader = self.accelerator.prepare(
            DataLoader(pairs, batch_size=batch_size, collate_fn=self.data_collator, shuffle=False)
        )
        chosen, rejected = [], []
        for batch in loader:
            c, r = self.compute_ref_log_probs(self.reference_model or self.model, batch)
            c, r = self.accelerator.gather_for_metrics((c, r))
            chosen += c.float().cpu().tolist()
            rejected += r.float().cpu().tolist()
        return pairs.add_column("ref_chosen_logps", chosen).add_column("ref_rejected_logps", rejected)


def _check_env_config(args) -> None:
    if not isinstance(args, EnvDPOConfig):
        raise TypeError(f"EnvDPOTrainer: env-driven DPO needs an EnvDPOConfig, got {type(args).__name__}")
    if args.precompute_ref_log_probs:
        raise ValueError(
            "EnvDPOConfig: precompute_ref_log_probs=True cannot be used with env_dataset: the "
            "pairs are sampled during training, after the reference would have been computed. "
            "Set precompute_ref_log_probs=False."
        )


_STAND_IN = Dataset.from_dict({"prompt": ["?"], "chosen": [" a"], "rejected": [" b"]})
"""What ``DPOTrainer.__init__`` (which needs a dataset and tokenizes raw preference data) is given in place of
pre-tokenized pairs; the trainer's ``train_dataset`` / ``eval_dataset`` are the pairs once it is built."""


def _checked(dataset, name: str, tokenizer, args):
    """``(what DPOTrainer.__init__ gets, the pre-tokenized pairs or None)``: raw preference data checked (TRL then
    tokenizes it), or pre-tokenized pairs checked and a stand-in for TRL."""
    if dataset is _STAND_IN:
        return dataset, None
    if is_tokenized(first_row(dataset, name)):
        pairs = check_tokenized_pairs(dataset, name, max_length=args.max_length, truncation_mode=args.truncation_mode)
        return _STAND_IN, pairs
    return check_raw_preferences(dataset, name, tokenizer), None


def _is_vision(dataset) -> bool:
    first = next(iter(dataset), None) or {}
    return "image" in first or "images" in first


__all__ = ["DataCollatorForMaskedPreference", "EmptyPairsWarning", "EnvDPOTrainer", "PAIR_COLUMNS"]
