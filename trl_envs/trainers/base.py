"""What every env trainer shares: its setup (env datasets, checks, reference model), rollouts, the sampler and the
model it generates with.

:class:`EnvTrainerMixin` is mixed in before a TRL trainer class (``class EnvGRPOTrainer(EnvTrainerMixin,
GRPOTrainer)``); the trainer keeps only its algorithm (how rollouts become training data). Its config mixes in
:class:`~trl_envs.trainers.rollout_args.RolloutArguments` (budgets, error strategy, ``rollout_budget()``). Setting up an
env trainer, in order: :func:`load_env_datasets` and :func:`frozen_reference` before the TRL ``__init__``,
:meth:`EnvTrainerMixin._init_env_trainer` just before it, :meth:`EnvTrainerMixin._check_env_launch` after it. What a new
env trainer adds is written down in docs/DESIGN.md ("A third env trainer").
"""

from __future__ import annotations

import contextlib
import copy
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from trl.models import unwrap_model_for_generation

from ..core.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder
from ..registry.env_datasets import resolve_row_datasets
from ..rollout.engine import RolloutBatchResult, run_rollout_batch
from ..rollout.event_loop import run_sync
from ..samplers.base import Sampler
from ..samplers.choice import build_sampler
from ..samplers.hf import HFSampler
from ..samplers.lockstep import LockstepSampler
from . import trl_seam
from .checkpoints import (
    CheckpointMarker,
    check_resume_settings,
    hold_output_dir,
    name_disk_full,
    run_settings,
    verify_checkpoint,
)
from .out_of_memory import name_out_of_memory
from .resume import resolve_checkpoint

ENV_DATASET_KINDS = "an RLDataset, RLDatasetBuilder or datasets.Dataset of env rows"


class EnvTrainerMixin:
    """Rollouts for a TRL trainer whose ``args`` mix in ``RolloutArguments``.

    Attributes:
        last_rollout: the :class:`RolloutBatchResult` of this rank's latest training rollout (for inspection); set by
            :meth:`_rollout_step`.
        policy_sampler: the in-process sampler of a ``sampler_backend`` other than ``generate`` (``static_cache``,
            ``continuous_batching``), built at the first rollout and kept; ``None`` before, and for ``generate``.

    A trainer calls :meth:`_init_env_trainer` before the TRL trainer's ``__init__`` and :meth:`_check_env_launch`
    after it.
    """

    custom_sampler: Sampler | None = None
    policy_sampler: Sampler | None = None
    last_rollout: RolloutBatchResult | None = None

    def _init_env_trainer(self, sampler: Sampler | None) -> None:
        """Set the env-trainer state; call before the TRL trainer's ``__init__``. Also checks the installed TRL has the
        private names ``trl_seam`` relies on, so an incompatible TRL fails here and not in a training step."""
        trl_seam.check_trl_compatibility()
        self.custom_sampler = sampler
        self.last_rollout = None

    def _check_env_launch(self, owner: str, *, chat_template: bool = True) -> None:
        """After the TRL ``__init__``: refuse a launch that would train one model per process
        (:func:`check_single_process_launch`) and, with ``chat_template``, a tokenizer without chat template (env
        renderers render chat messages)."""
        check_single_process_launch(self.accelerator.num_processes, os.environ, owner)
        check_sampler_backend(self, owner)
        if chat_template:
            require_chat_template(trl_seam.tokenizer_of(self), owner)

    # -- checkpoints ---------------------------------------------------------------------------------------------

    def _mark_checkpoints(self, model, env: str | None) -> None:
        """Mark each checkpoint complete once saved, with this run's settings (call after the TRL ``__init__``)."""
        self._run_settings = run_settings(self.args, model, env)
        self._checkpoint_marker = CheckpointMarker(self._run_settings)
        self.add_callback(self._checkpoint_marker)

    def _run_guards(self) -> contextlib.AbstractContextManager:
        """What ``train()`` runs under: ``output_dir``'s lock; a full disk while a checkpoint is written, and running
        out of memory, each turned into one line naming the cause (see
        :func:`~trl_envs.trainers.checkpoints.name_disk_full`, :mod:`~trl_envs.trainers.out_of_memory`)."""
        stack = contextlib.ExitStack()
        stack.enter_context(hold_output_dir(self.args.output_dir))
        stack.enter_context(name_disk_full(self.args.output_dir, getattr(self, "_checkpoint_marker", None)))
        stack.enter_context(name_out_of_memory(lambda: self.state.global_step + 1))
        return stack

    def _checked_checkpoint(self, resume_from_checkpoint) -> str | None:
        """The checkpoint ``resume_from_checkpoint`` names (complete and readable, see ``resume``), refused when it was
        written with other settings unless ``args.resume_allow_changes``."""
        checkpoint = resolve_checkpoint(resume_from_checkpoint, self.args.output_dir)
        if checkpoint is not None:
            check_resume_settings(
                checkpoint,
                verify_checkpoint(checkpoint),
                getattr(self, "_run_settings", {}),
                getattr(self.args, "resume_allow_changes", False),
            )
        return checkpoint

    # -- the sampler and the model it generates with ------------------------------------------------------------

    def sampling_settings(self) -> dict[str, Any]:
        """Keyword arguments of :class:`HFSampler` for the policy: temperature, top_p, top_k, min_p,
        repetition_penalty (from the trainer's config)."""
        args = self.args
        return dict(
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            min_p=args.min_p,
            repetition_penalty=args.repetition_penalty,
        )

    def _sampler(self) -> Sampler:
        """The sampler of this rollout: the custom one, TRL's vLLM generation (``use_vllm``), or the config's
        in-process backend (``sampler_backend``: ``generate``, ``static_cache``, ``continuous_batching``) on the
        policy being trained. The in-process sampler is built once and kept (a static cache's compiled shapes)."""
        if self.custom_sampler is not None:
            return self.custom_sampler
        if getattr(self.args, "use_vllm", False):
            from ..samplers.vllm import VLLMSampler

            return VLLMSampler(trl_seam.vllm_generation(self), trl_seam.tokenizer_of(self))
        backend = self.args.resolved_sampler_backend()
        if backend == "generate":
            return HFSampler(
                self.model_wrapped,
                trl_seam.tokenizer_of(self),
                model_context=self.generation_model,
                **self.sampling_settings(),
            )
        if self.policy_sampler is None:
            self.policy_sampler = build_sampler(
                backend,
                self.model_wrapped,
                trl_seam.tokenizer_of(self),
                model_context=self.generation_model,
                continuous_batching_config=self.args.continuous_batching_options(),
                **self.sampling_settings(),
            )
        return self.policy_sampler

    @contextlib.contextmanager
    def generation_model(self) -> Iterator:
        """The policy, ready to ``generate``: unwrapped from DDP / DeepSpeed (ZeRO-3 parameters gathered unless
        ``args.ds3_gather_for_generation`` is False), FSDP v1 parameters materialised, under the autocast TRL computes
        the training logprobs in (``accelerator.autocast()``: with bf16 mixed precision over fp32 weights, e.g. PEFT,
        sampling in fp32 would make sampling and training logprobs disagree)."""
        args = self.args
        with (
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
            ) as unwrapped,
            trl_seam.distributed_backend(self.accelerator).summon_full_params(self.model_wrapped, recurse=False),
            self.accelerator.autocast(),
        ):
            yield unwrapped

    # -- rollouts ------------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _rollout_sampler(self, *, equal_batch_sizes: bool = False) -> Iterator[Sampler]:
        """The sampler of one rollout on this rank. Every rank makes the same number of generation calls (they may be
        collectives: ZeRO-3, FSDP, vLLM server): on exit, a rank whose episodes ended early keeps generating until all
        are done. ``equal_batch_sizes`` also pads every call to the same number of prompts on every rank (vLLM server
        mode and tensor-parallel colocate)."""
        policy = self._sampler()
        if callable(getattr(policy, "submit", None)):  # continuous batching: no collective, requests go as they come
            with policy.session():
                yield policy
            return
        sampler = LockstepSampler(
            policy,
            [trl_seam.tokenizer_of(self).pad_token_id],
            self.accelerator.device,
            equal_batch_sizes=equal_batch_sizes,
        )
        try:
            yield sampler
        finally:
            sampler.drain()

    def _rollout_options(self) -> dict[str, Any]:
        """The config's budget, error strategy and sampler wait, as keyword arguments of a rollout."""
        args = self.args
        return dict(
            budget=args.rollout_budget(self.model),
            error_strategy=args.error_strategy(),
            max_wait_s=args.sampler_max_wait_s,
        )

    def _rollout_step(
        self,
        step: Callable[..., Any],
        builders: Sequence[EnvGroupBuilder],
        *,
        equal_batch_sizes: bool = False,
        **options,
    ) -> Any:
        """A training rollout step on this rank: ``step(builders, sampler, budget=..., error_strategy=...,
        max_wait_s=..., **options)`` (e.g. :func:`~trl_envs.training_data.pairs_step.rollout_pairs`) with the policy's
        sampler (:meth:`_rollout_sampler`); the step's ``rollout`` becomes :attr:`last_rollout`."""
        with self._rollout_sampler(equal_batch_sizes=equal_batch_sizes) as sampler:
            out = step(builders, sampler, **self._rollout_options(), **options)
        self.last_rollout = out.rollout
        return out

    def _rollout_groups(
        self, builders: Sequence[EnvGroupBuilder], *, equal_batch_sizes: bool = False
    ) -> RolloutBatchResult:
        """Roll out ``builders`` on this rank, one batched generation call per turn (see :meth:`_rollout_sampler`)."""
        options = self._rollout_options()
        with self._rollout_sampler(equal_batch_sizes=equal_batch_sizes) as sampler:
            return run_rollout_batch(
                builders, sampler, options["budget"], options["error_strategy"], options["max_wait_s"]
            )


# -- setup ---------------------------------------------------------------------------------------------------------


def load_env_datasets(
    env_dataset,
    eval_env_dataset,
    *,
    owner: str,
    model,
    processing_class,
    group_size: int,
    eval_group_size: int,
    groups_per_batch: int,
    seed: int | None,
) -> tuple[RLDataset, RLDataset | None, Any]:
    """The training and evaluation envs of an env trainer, and its processing class.

    ``env_dataset`` is an :class:`RLDataset`, an :class:`RLDatasetBuilder` (built; its test split becomes the evaluation
    envs unless ``eval_env_dataset`` is given) or a ``datasets.Dataset`` / ``IterableDataset`` of env rows (an
    :class:`~trl_envs.registry.env_datasets.EnvRowDataset` of ``groups_per_batch`` groups of ``group_size`` envs per
    batch; ``eval_group_size`` for rows of ``eval_env_dataset``). Rows need the tokenizer: without
    ``processing_class`` it is loaded from ``model`` and returned. See :func:`resolve_env_datasets` for ``seed``.
    """
    env_dataset, eval_env_dataset, processing_class = resolve_row_datasets(
        env_dataset,
        eval_env_dataset,
        model=model,
        processing_class=processing_class,
        group_size=group_size,
        eval_group_size=eval_group_size,
        groups_per_batch=groups_per_batch,
        owner=owner,
    )
    train, evaluation = resolve_env_datasets(env_dataset, eval_env_dataset, owner, seed=seed)
    return train, evaluation, processing_class


def resolve_env_datasets(
    env_dataset,
    eval_env_dataset,
    owner: str,
    accepted: str = ENV_DATASET_KINDS,
    seed: int | None = None,
) -> tuple[RLDataset, RLDataset | None]:
    """The training and evaluation :class:`RLDataset`: an ``RLDatasetBuilder`` is built (its test split becomes the
    evaluation envs unless ``eval_env_dataset`` is given; with ``seed``, the trainer's seed, a builder whose ``seed`` is
    unset gets it: :func:`~trl_envs.trainers.dataset_seed.seed_dataset_builder`). Raises ``TypeError`` for anything
    else, naming ``owner`` and what it accepts, and ``ValueError`` for a dataset without batches."""
    if isinstance(env_dataset, RLDatasetBuilder):
        if seed is not None:
            from .dataset_seed import seed_dataset_builder

            env_dataset = seed_dataset_builder(env_dataset, seed, owner)
        train, test = run_sync(env_dataset)
        return train, eval_env_dataset if eval_env_dataset is not None else test
    if isinstance(env_dataset, RLDataset):
        if len(env_dataset) == 0:
            raise ValueError(f"{owner}: env_dataset has no batches")
        return env_dataset, eval_env_dataset
    raise TypeError(f"{owner}: env_dataset must be {accepted}, got {type(env_dataset).__name__}")


def frozen_reference(model, peft_config, *, needed: bool = True):
    """The reference model to hand to the TRL trainer, or ``None`` where TRL's own choice is right.

    The reference is the policy as passed. TRL would reload a model object's weights from
    ``model.config._name_or_path``: empty for a model built in memory, stale for one changed since it was loaded; so a
    model object gets a frozen copy of itself (``eval()``, no gradients). ``None`` (TRL's own reference) for a model id
    or path (loaded from there), under PEFT (the adapter switched off), and when no reference is ``needed`` (GRPO with
    ``beta == 0``, DPO with precomputed reference log-probabilities).
    """
    if not needed or peft_config is not None or isinstance(model, str):
        return None
    with contextlib.suppress(ImportError):
        from peft import PeftModel

        if isinstance(model, PeftModel):
            return None
    reference = copy.deepcopy(model)
    reference.eval()
    reference.requires_grad_(False)
    return reference


def require_chat_template(tokenizer, owner: str) -> None:
    """Env renderers render chat messages: refuse a tokenizer without chat template, naming it."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{owner}: the tokenizer {tokenizer.name_or_path!r} has no chat template; env renderers need "
            "one (use a chat model or set tokenizer.chat_template)."
        )


def check_sampler_backend(trainer, owner: str) -> None:
    """Refuse, naming the config field, an in-process backend other than ``generate`` where ``trainer``'s policy
    parameters are sharded (DeepSpeed ZeRO-3, FSDP): every decoding step would need them gathered. Warn where
    continuous batching cannot follow the trainer's mixed-precision autocast."""
    backend = trainer.args.resolved_sampler_backend()
    if backend == "generate" or trainer.custom_sampler is not None or getattr(trainer.args, "use_vllm", False):
        return
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    sharded = "DeepSpeed ZeRO-3" if plugin is not None and int(plugin.zero_stage) == 3 else None
    if getattr(trainer, "is_fsdp_enabled", False):
        sharded = "FSDP"
    if sharded is not None:
        raise ValueError(
            f"{owner}: sampler_backend={backend!r} is not supported with {sharded} (the policy's parameters are "
            "sharded); use sampler_backend='generate' (it gathers them per call), ZeRO-2 / DDP, or vLLM."
        )
    mixed = trainer.accelerator.mixed_precision
    weights = next(trainer.model.parameters()).dtype
    if backend == "continuous_batching" and mixed in ("bf16", "fp16") and weights == torch.float32:
        warnings.warn(
            f"{owner}: sampler_backend='continuous_batching' samples in the model's own dtype (float32): "
            f"transformers runs it in a thread of its own, outside the trainer's {mixed} autocast, so sampling "
            "logprobs differ slightly from the training logprobs. Load the model in that dtype (--dtype "
            "bfloat16) to have them agree, or use sampler_backend='static_cache'.",
            UserWarning,
            stacklevel=2,
        )


def check_single_process_launch(num_processes: int, environ, owner: str) -> None:
    """Refuse N launched processes that each run as a separate single-process job (on a CPU-only machine, a torchrun /
    `accelerate launch --multi_gpu` job without use_cpu=True): they would train N independent models silently."""
    launched = int(environ.get("WORLD_SIZE", "1") or 1)
    if launched > 1 and num_processes == 1:
        raise RuntimeError(
            f"{owner}: {launched} processes were launched (WORLD_SIZE={launched}) but this trainer runs as a "
            "single process, so each process would train its own model. On a machine without GPUs set use_cpu=True "
            "(--use_cpu true) or ACCELERATE_USE_CPU=true to run them together over gloo; see the README's "
            "'Distributed training'."
        )


__all__ = [
    "EnvTrainerMixin",
    "check_sampler_backend",
    "check_single_process_launch",
    "frozen_reference",
    "load_env_datasets",
    "require_chat_template",
    "resolve_env_datasets",
]
