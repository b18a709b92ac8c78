"""The rollouts of an env trainer: one object the trainer holds, and the sources its training batches come from.

:class:`EnvRollouts` rolls out env groups with the policy a trainer trains: it owns the sampler (a custom one, TRL's
vLLM generation, or the config's in-process backend on the policy), the model it generates with (unwrapped, ZeRO-3
parameters gathered), the lock-step that keeps every rank's generation calls in step, and the config's budgets and
error strategy. It reads the trainer only through its public surface (``args``, ``accelerator``, ``model``,
``model_wrapped``) and the seam (the tokenizer, vLLM generation).

A :class:`RolloutSource` hands the trainer the rollout of each training batch: :class:`SyncRolloutSource` rolls it out
when asked; :class:`~trl_envs.trainers.async_rollouts.PipelinedRolloutSource` (``max_staleness >= 1``) takes it from
a pipeline that rolled it out ahead. Both go through :meth:`RolloutSource.rollout`, the one place a training rollout
is recorded (:attr:`EnvRollouts.last_rollout`) and announced to listeners (:meth:`EnvRollouts.add_listener`, e.g. the
rollout traces). Rollouts that are not training data (evaluation, re-rolls) call :meth:`EnvRollouts.rollout` and are
not recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from trl.models import unwrap_model_for_generation

from ..core.types import EnvGroupBuilder
from ..rollout.engine import RolloutBatchResult, run_rollout_batch
from ..samplers.base import Sampler
from ..samplers.choice import build_sampler
from ..samplers.hf import HFSampler
from ..samplers.lockstep import LockstepSampler
from . import trl_seam
from .env_setup import text_tokenizer
from .group_index import GroupKey

RolloutListener = Callable[[RolloutBatchResult], None]
"""Called with each training rollout, on the rank that made it (see :meth:`EnvRollouts.add_listener`)."""


class EnvRollouts:
    """Rolls out env groups with the policy ``trainer`` trains (module docstring).

    Args:
        trainer: the TRL trainer whose ``args`` mix in :class:`~trl_envs.trainers.rollout_args.RolloutArguments`.
            Read at each rollout (the model is wrapped by accelerate only once training starts).
        sampler: a :class:`~trl_envs.samplers.base.Sampler` to roll out with instead of the policy.

    Attributes:
        custom_sampler: ``sampler`` as given (``None``: the policy samples).
        policy_sampler: the in-process sampler of a ``sampler_backend`` other than ``generate`` (``static_cache``,
            ``continuous_batching``), built at the first rollout and kept (a static cache's compiled shapes); ``None``
            before, and for ``generate``.
        last_rollout: the :class:`RolloutBatchResult` of this rank's latest training rollout (``None`` before the
            first); evaluation rollouts never replace it.
    """

    def __init__(self, trainer, sampler: Sampler | None = None):
        self.trainer = trainer
        self.custom_sampler = sampler
        self.policy_sampler: Sampler | None = None
        self.last_rollout: RolloutBatchResult | None = None
        self._listeners: list[RolloutListener] = []

    # -- training rollouts: recorded and announced ----------------------------------------------------------------

    def add_listener(self, listener: RolloutListener) -> None:
        """Call ``listener(rollout)`` with every training rollout of this rank, as it is recorded."""
        self._listeners.append(listener)

    def record(self, rollout: RolloutBatchResult) -> None:
        """Make ``rollout`` the latest training rollout and announce it (called by :meth:`RolloutSource.rollout`)."""
        self.last_rollout = rollout
        for listener in self._listeners:
            listener(rollout)

    # -- the sampler and the model it generates with ---------------------------------------------------------------

    def sampling_settings(self) -> dict[str, Any]:
        """Keyword arguments of :class:`HFSampler` for the policy, from the trainer's config: temperature, top_p,
        top_k, min_p, repetition_penalty, and ``generation_kwargs`` / ``cache_implementation`` where the config has
        them (GRPO)."""
        args = self.trainer.args
        settings = dict(
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            min_p=args.min_p,
            repetition_penalty=args.repetition_penalty,
        )
        for name in ("generation_kwargs", "cache_implementation"):
            if hasattr(args, name):
                settings[name] = getattr(args, name)
        return settings

    def sampler(self) -> Sampler:
        """The sampler of a rollout: the custom one, TRL's vLLM generation (``use_vllm``), or the config's in-process
        backend (``sampler_backend``: ``generate``, ``static_cache``, ``continuous_batching``) on the policy being
        trained. A backend other than ``generate`` is built once and kept (:attr:`policy_sampler`)."""
        if self.custom_sampler is not None:
            return self.custom_sampler
        trainer, args = self.trainer, self.trainer.args
        if getattr(args, "use_vllm", False):
            from ..samplers.vllm import VLLMSampler

            return VLLMSampler(trl_seam.vllm_generation(trainer), text_tokenizer(trainer.processing_class))
        backend = args.resolved_sampler_backend()
        if backend == "generate":
            return HFSampler(
                trainer.model_wrapped,
                text_tokenizer(trainer.processing_class),
                model_context=self.generation_model,
                **self.sampling_settings(),
            )
        if self.policy_sampler is None:
            self.policy_sampler = build_sampler(
                backend,
                trainer.model_wrapped,
                text_tokenizer(trainer.processing_class),
                model_context=self.generation_model,
                continuous_batching_config=args.continuous_batching_options(),
                **self.sampling_settings(),
            )
        return self.policy_sampler

    @contextlib.contextmanager
    def generation_model(self) -> Iterator:
        """The policy, ready to ``generate``: unwrapped from DDP / DeepSpeed (ZeRO-3 parameters gathered unless
        ``args.ds3_gather_for_generation`` is False), FSDP v1 parameters materialised, under the autocast TRL computes
        the training logprobs in (``accelerator.autocast()``: with bf16 mixed precision over fp32 weights, e.g. PEFT,
        sampling in fp32 would make sampling and training logprobs disagree)."""
        trainer, args = self.trainer, self.trainer.args
        with (
            unwrap_model_for_generation(
                trainer.model_wrapped,
                trainer.accelerator,
                gather_deepspeed3_params=args.ds3_gather_for_generation,
                gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
            ) as unwrapped,
            fsdp1_full_params(trainer.accelerator, trainer.model_wrapped),
            trainer.accelerator.autocast(),
        ):
            yield unwrapped

    # -- rollouts --------------------------------------------------------------------------------------------------

    def equal_batch_sizes(self) -> bool:
        """Whether every generation call must have as many prompts on every rank: vLLM server mode and
        tensor-parallel colocate (one generation serves several ranks)."""
        args = self.trainer.args
        return bool(getattr(args, "use_vllm", False)) and (
            args.vllm_mode == "server" or args.vllm_tensor_parallel_size > 1
        )

    @contextlib.contextmanager
    def session(self) -> Iterator[Sampler]:
        """The sampler of one rollout on this rank. Every rank makes the same number of generation calls (they may be
        collectives: ZeRO-3, FSDP, vLLM server): on exit, a rank whose episodes ended early keeps generating until all
        are done (:class:`LockstepSampler`, which also pads calls to equal sizes where :meth:`equal_batch_sizes`). A
        continuous-batching sampler makes no collective: its requests go as they come."""
        policy = self.sampler()
        if callable(getattr(policy, "submit", None)):
            with policy.session():
                yield policy
            return
        sampler = LockstepSampler(
            policy,
            [text_tokenizer(self.trainer.processing_class).pad_token_id],
            self.trainer.accelerator.device,
            equal_batch_sizes=self.equal_batch_sizes(),
        )
        try:
            yield sampler
        finally:
            sampler.drain()

    def options(self) -> dict[str, Any]:
        """The config's budget, error strategy and sampler wait, as keyword arguments of
        :func:`~trl_envs.rollout.engine.run_rollout_batch_async` (``budget``, ``strategy``, ``max_wait_s``)."""
        args = self.trainer.args
        return dict(
            budget=args.rollout_budget(self.trainer.model),
            strategy=args.error_strategy(),
            max_wait_s=args.sampler_max_wait_s,
        )

    def rollout(self, builders: Sequence[EnvGroupBuilder]) -> RolloutBatchResult:
        """Roll out ``builders`` on this rank with the policy, one batched generation call per turn (see
        :meth:`session`). Not recorded: a training batch goes through a :class:`RolloutSource`."""
        options = self.options()
        with self.session() as sampler:
            return run_rollout_batch(builders, sampler, options["budget"], options["strategy"], options["max_wait_s"])


class RolloutSource:
    """Where a trainer's training rollouts come from. :meth:`rollout` is the interface; a source implements
    :meth:`produce` (and :meth:`open` / :meth:`close` if it runs something between them).

    Args:
        rollouts: the trainer's :class:`EnvRollouts` (it records each training rollout).
    """

    def __init__(self, rollouts: EnvRollouts):
        self.rollouts = rollouts

    def rollout(
        self, builders: Sequence[EnvGroupBuilder], keys: Sequence[GroupKey] | None = None
    ) -> RolloutBatchResult:
        """The rollout of one training batch: the groups ``builders`` (whose keys are ``keys``, where the trainer
        has them), recorded as the latest training rollout."""
        result = self.produce(builders, keys)
        self.rollouts.record(result)
        return result

    def produce(self, builders: Sequence[EnvGroupBuilder], keys: Sequence[GroupKey] | None) -> RolloutBatchResult:
        """The rollout of ``builders``; what a source implements."""
        raise NotImplementedError

    def open(self) -> None:
        """Called when training starts."""

    def close(self) -> None:
        """Called when training ends (returns or raises): stop whatever the source runs."""


class SyncRolloutSource(RolloutSource):
    """Rolls out each training batch when the trainer asks for it, with the current policy."""

    def produce(self, builders: Sequence[EnvGroupBuilder], keys: Sequence[GroupKey] | None) -> RolloutBatchResult:
        return self.rollouts.rollout(builders)


def fsdp1_full_params(accelerator, model):
    """Materialise FSDP v1's sharded parameters (top level, no writeback needed for generation) for the length of the
    context; nothing to do for FSDP v2 (parameters are DTensors, always usable), DeepSpeed or a single process.
    Reads only accelerate's public state (``state.fsdp_plugin.fsdp_version``) and torch's public FSDP API."""
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is None or getattr(plugin, "fsdp_version", 1) != 1:
        return contextlib.nullcontext()
    from torch.distributed.fsdp import FullyShardedDataParallel

    return FullyShardedDataParallel.summon_full_params(model, recurse=False)


__all__ = ["EnvRollouts", "RolloutListener", "RolloutSource", "SyncRolloutSource"]
