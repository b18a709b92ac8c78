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
from transformers import AutoTokenizer, PreTrainedTokenizerBase
from transformers.trainer_utils import TrainOutput
from trl import DPOConfig, DPOTrainer

from ..core.types import RLDataset, RLDatasetBuilder
from ..registry.names import env_label as named_env
from ..rollout.engine import RolloutBatchResult
from ..samplers.base import Sampler
from ..training_data.preference import PAIR_COLUMNS, PairStats
from ..training_data.preference_checks import (
    MASK_COLUMNS,
    check_raw_preferences,
    check_tokenized_pairs,
    first_row,
    is_tokenized,
)
from . import trl_seam
from .dpo_config import EnvDPOConfig
from .dpo_rounds import DPORounds, EmptyPairsWarning
from .env_setup import check_env_launch, frozen_reference, load_env_datasets
from .preference_collator import DataCollatorForMaskedPreference
from .rollouts import EnvRollouts, SyncRolloutSource
from .run_guards import RunGuards


@trl_seam.model_tags("trl", "dpo", "trl_envs")
class EnvDPOTrainer(DPOTrainer):
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
        trl_seam.check_trl_compatibility()  # an incompatible TRL fails here, not in a training step
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
            train_dataset = _placeholder_pairs()  # DPOTrainer needs a dataset now; each round trains on its own
        text_tokenizer = getattr(processing_class, "tokenizer", processing_class)
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
        check_env_launch(self, "EnvDPOTrainer", sampler, chat_template=envs is not None)
        self.run_guards = RunGuards(self, model, named_env(env_dataset) if envs is not None else None)
        self.rounds = DPORounds(self, SyncRolloutSource(self.rollouts), *envs) if envs is not None else None

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

    # -- TRL hooks -----------------------------------------------------------------------------------------------

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        """Pre-tokenized pairs are checked and used as they are; raw preference data is checked, then tokenized by
        TRL."""
        if is_tokenized(first_row(dataset, dataset_name)):
            return check_tokenized_pairs(
                dataset, dataset_name, max_length=args.max_length, truncation_mode=args.truncation_mode
            )
        dataset = check_raw_preferences(dataset, dataset_name, trl_seam.tokenizer_of(self))
        return super()._prepare_dataset(dataset, processing_class, args, dataset_name)

    def _set_signature_columns_if_needed(self):
        """TRL's columns plus the per-token masks, so ``remove_unused_columns`` keeps them."""
        super()._set_signature_columns_if_needed()
        trl_seam.keep_columns(self, MASK_COLUMNS)


def _check_env_config(args) -> None:
    if not isinstance(args, EnvDPOConfig):
        raise TypeError(f"EnvDPOTrainer: env-driven DPO needs an EnvDPOConfig, got {type(args).__name__}")
    if args.precompute_ref_log_probs:
        raise ValueError(
            "EnvDPOConfig: precompute_ref_log_probs=True cannot be used with env_dataset: the "
            "pairs are sampled during training, after the reference would have been computed. "
            "Set precompute_ref_log_probs=False."
        )


def _placeholder_pairs() -> Dataset:
    """One pre-tokenized pair for ``DPOTrainer.__init__`` (which needs a dataset) before the first round."""
    return Dataset.from_dict(
        {"prompt_ids": [[0]], "chosen_ids": [[0]], "rejected_ids": [[1]], "chosen_mask": [[1]], "rejected_mask": [[1]]}
    )


def _is_vision(dataset) -> bool:
    first = next(iter(dataset), None) or {}
    return "image" in first or "images" in first


__all__ = ["DataCollatorForMaskedPreference", "EmptyPairsWarning", "EnvDPOTrainer", "PAIR_COLUMNS"]
