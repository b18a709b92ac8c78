"""Setting up an env trainer: its env datasets, its reference model, and the checks of its launch.

Building an env trainer, in order: :func:`load_env_datasets` and :func:`frozen_reference` before the TRL
``__init__`` (``trl_seam.check_trl_compatibility()`` first of all), the TRL ``__init__``, then
:func:`check_env_launch`. The trainer then holds an :class:`~trl_envs.trainers.rollouts.EnvRollouts` (its rollouts) and
a :class:`~trl_envs.trainers.run_guards.RunGuards` (what ``train()`` runs under). What a new env trainer adds is
written down in docs/design/trl_seam.md ("A third env trainer").
"""

from __future__ import annotations

import contextlib
import copy
import os
import warnings
from typing import Any

import torch

from ..core.types import RLDataset, RLDatasetBuilder
from ..registry.env_datasets import resolve_row_datasets
from ..rollout.event_loop import run_sync
from ..samplers.base import Sampler

ENV_DATASET_KINDS = "an RLDataset, RLDatasetBuilder or datasets.Dataset of env rows"


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


def text_tokenizer(processing_class):
    """The text tokenizer of a trainer's ``processing_class``: the tokenizer itself, or a processor's ``.tokenizer``."""
    return getattr(processing_class, "tokenizer", processing_class)


def require_chat_template(tokenizer, owner: str) -> None:
    """Env renderers render chat messages: refuse a tokenizer without chat template, naming it."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{owner}: the tokenizer {tokenizer.name_or_path!r} has no chat template; env renderers need "
            "one (use a chat model or set tokenizer.chat_template)."
        )


def check_env_launch(trainer, owner: str, custom_sampler: Sampler | None, *, chat_template: bool = True) -> None:
    """After the TRL ``__init__``: refuse a launch that would train one model per process
    (:func:`check_single_process_launch`), a sampler backend the launch cannot run (:func:`check_sampler_backend`)
    and, with ``chat_template``, a tokenizer without chat template (env renderers render chat messages)."""
    check_single_process_launch(trainer.accelerator.num_processes, os.environ, owner)
    check_sampler_backend(trainer, owner, custom_sampler)
    if chat_template:
        require_chat_template(text_tokenizer(trainer.processing_class), owner)


def check_continuous_batching_version(args, owner: str, version: str | None = None) -> None:
    """Refuse, before any model loads, continuous batching (``sampler_backend='continuous_batching'`` or TRL's
    ``use_transformers_continuous_batching=True``) on a transformers older than the sampler needs
    (:data:`~trl_envs.samplers.continuous.NEEDS_TRANSFORMERS`; ``version``: the installed one), in one line naming
    the setting, the version found and needed, and the backends that work there."""
    if args.resolved_sampler_backend() != "continuous_batching":
        return
    from ..samplers.continuous import check_transformers_version

    setting = (
        "use_transformers_continuous_batching=True"
        if getattr(args, "use_transformers_continuous_batching", False)
        else "sampler_backend='continuous_batching'"
    )
    check_transformers_version(f"{owner}: {setting}", version)


def check_sampler_backend(trainer, owner: str, custom_sampler: Sampler | None = None) -> None:
    """Refuse, naming the config field, an in-process backend other than ``generate`` where ``trainer``'s policy
    parameters are sharded (DeepSpeed ZeRO-3, FSDP): every decoding step would need them gathered. Warn where
    continuous batching cannot follow the trainer's mixed-precision autocast. Nothing to check with a
    ``custom_sampler`` (the trainer's own) or vLLM."""
    backend = trainer.args.resolved_sampler_backend()
    if backend == "generate" or custom_sampler is not None or getattr(trainer.args, "use_vllm", False):
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
    "check_env_launch",
    "check_sampler_backend",
    "check_single_process_launch",
    "frozen_reference",
    "load_env_datasets",
    "require_chat_template",
    "resolve_env_datasets",
    "text_tokenizer",
]
