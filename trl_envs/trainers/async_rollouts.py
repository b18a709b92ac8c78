"""Rollouts that overlap training: bounded-staleness asynchronous GRPO (``EnvGRPOConfig.max_staleness >= 1``), as
the :class:`PipelinedRolloutSource` of the trainer's training batches (the interface:
:mod:`~trl_envs.trainers.rollouts`).

Contract (docs/async.md):

* A background thread (:mod:`trl_envs.rollout.async_pipeline`, its own event loop) rolls out the trainer's next
  generation batches (the same groups, in the same order, as the synchronous trainer would roll out) while the trainer
  trains. It samples with a :class:`~trl_envs.samplers.process.SamplerProcess`: a copy of the policy in a child
  process (frozen parameters, e.g. a LoRA base, shared, not copied), its trainable weights staged from the policy
  after every ``weight_sync_steps`` optimizer steps. The version of the weights is the optimizer step they were
  staged at.
* A batch records the oldest and newest weight version it sampled with. The pipeline starts a batch only once the
  sampler's weights are at least ``predicted train step - max_staleness``, so every group is trained at most
  ``max_staleness`` optimizer steps after the weights that sampled its oldest token. A batch found older anyway (a
  step the schedule did not predict) is re-rolled by the policy itself before training, on every rank together, and
  counted (``async/rerolled_groups``): stale groups are never trained.
* Batches whose weights are ready roll out concurrently on the background loop; their ``generate`` calls run in the
  sampler process, so both env time and generation overlap the trainer's compute.
* Sampling logprobs vs the trained policy's are corrected by TRL's own importance-sampling path
  (:mod:`~trl_envs.trainers.off_policy`).
* The pipeline is started at the first training rollout (after a checkpoint was loaded, so a resumed run starts
  from the checkpoint's weights) and stopped when ``train()`` returns or raises (Ctrl-C, an env error): the running
  batch is cancelled (its envs' cleanup runs), the sampler process is stopped without waiting for a ``generate``
  call in flight (terminated after a short grace), and the thread is joined, so a run exits within seconds of its
  last step.
* Distributed: neither the thread nor the sampler process makes a collective call (the copy is a plain module, not
  the DDP / DeepSpeed wrapper);
  every collective (the staleness check, metrics) is made by the main thread at the same point on every rank. ZeRO-3
  and FSDP shard the parameters the copy would need and are refused when training starts.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import TrainerCallback

from ..core.types import EnvGroupBuilder
from ..rollout.async_pipeline import THREAD_NAME, RolloutJob, RolloutPipeline, VersionedSampler
from ..rollout.engine import RolloutBatchResult
from ..samplers.base import Sampler
from ..samplers.process import SamplerProcess
from . import trl_seam
from .env_setup import text_tokenizer
from .group_index import GroupKey, keys_of_rows
from .rollouts import EnvRollouts, RolloutSource


class _SyncWeights(TrainerCallback):
    def __init__(self, state: _PipelineState, every: int):
        self.state, self.every = state, every

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            self.state.sampler.stage(state.global_step)
            self.state.pipeline.weights_changed()


def split_cpu_threads(threads: int, device: torch.device) -> tuple[int, int]:
    """Torch threads for the trainer and for the sampler process. On CPU the two compute at the same time, so they
    split the process's threads (the trainer keeps the larger half; each at least 1): giving each all of them
    oversubscribes the cores and their thread pools spin against each other. On an accelerator both keep them."""
    if device.type != "cpu":
        return threads, threads
    sampler = max(1, threads // 2)
    return max(1, threads - sampler), sampler


def lookahead_batches(max_staleness: int, steps_per_batch: float) -> int:
    """How many generation batches the pipeline is given ahead of the one being trained."""
    return max(1, math.ceil(max_staleness / steps_per_batch))


@dataclass
class _PipelineState:
    sampler: SamplerProcess
    pipeline: RolloutPipeline
    keys: Iterator[list[GroupKey]]
    start_step: int
    micro_per_batch: int  # micro-steps (training_step calls) per generation batch
    grad_accum: int
    lookahead: int
    torch_threads: int  # the process's torch threads before the pipeline started (restored when it stops)
    submitted: int = 0
    consumed: int = 0
    callback: TrainerCallback | None = None

    def train_step_of(self, index: int) -> int:
        return self.start_step + (index * self.micro_per_batch) // self.grad_accum


class PipelinedRolloutSource(RolloutSource):
    """The training batches of ``EnvGRPOTrainer`` with ``max_staleness >= 1``, rolled out ahead by a background
    pipeline (module docstring).

    Args:
        rollouts: the trainer's :class:`~trl_envs.trainers.rollouts.EnvRollouts` (a batch found too stale is re-rolled
            with it).
        trainer: the ``EnvGRPOTrainer``, through its public surface: ``args``, ``state``, ``accelerator``, ``model``,
            ``env_group``, ``get_train_dataloader`` (a second copy predicts the coming batches), ``add_callback`` /
            ``remove_callback`` (the weight sync).

    Attributes:
        batches: one record per trained generation batch since training started: ``step`` (optimizer step it was
            trained at), ``oldest_version`` / ``newest_version`` (weights it was sampled with; after a re-roll, the
            current step), ``rerolled`` (it was too stale and was rolled out again), ``groups`` (the texts of its group
            keys).
    """

    def __init__(self, rollouts: EnvRollouts, trainer):
        super().__init__(rollouts)
        self.trainer = trainer
        self.batches: list[dict[str, Any]] = []
        self._state: _PipelineState | None = None

    @property
    def running(self) -> bool:
        """Whether the background pipeline is running (it runs only inside ``train()``)."""
        return self._state is not None

    def open(self) -> None:
        """Refuse a setup the sampler copy cannot follow (:func:`check_async_supported`); start a new record. The
        pipeline itself starts at the first training rollout, after a checkpoint was loaded."""
        check_async_supported(self.trainer, self.rollouts.custom_sampler)
        self.batches = []

    def produce(self, builders: Sequence[EnvGroupBuilder], keys: Sequence[GroupKey] | None) -> RolloutBatchResult:
        """The rollout of this generation batch's groups ``keys``, taken from the pipeline (started on first use)."""
        trainer, args = self.trainer, self.trainer.args
        keys = list(keys or [])
        state = self._state or self._start()
        while state.submitted <= state.consumed + state.lookahead:
            self._submit_next(state)
        waited = time.perf_counter()
        ready = state.pipeline.take(state.consumed)
        waited = time.perf_counter() - waited
        state.consumed += 1
        if ready.job.keys != keys:
            raise RuntimeError(
                f"EnvGRPOTrainer (max_staleness={args.max_staleness}): the pipeline rolled out "
                f"groups {list(map(str, ready.job.keys))} but the trainer asked for {list(map(str, keys))}; the data "
                "order is not one the pipeline can predict (an IterableDataset with shuffling?). Use "
                "max_staleness=0 for this dataset."
            )
        step = trainer.state.global_step
        staleness = step - ready.oldest_version
        worst = staleness
        accelerator = trainer.accelerator
        if accelerator.num_processes > 1:
            worst = int(accelerator.gather(torch.tensor([staleness], device=accelerator.device)).max())
        result, rerolled = ready.result, worst > args.max_staleness
        oldest, newest = ready.oldest_version, max(ready.versions, default=ready.oldest_version)
        if rerolled:  # every rank re-rolls together: the policy's own rollout may be a collective
            result = self.rollouts.rollout(builders)
            staleness, oldest, newest = 0, step, step
        self.batches.append(
            dict(
                step=step,
                oldest_version=oldest,
                newest_version=newest,
                rerolled=rerolled,
                groups=[str(k) for k in keys],
            )
        )
        trl_seam.record_mean_metrics(
            trainer,
            "train",
            {
                "async/staleness": [staleness],
                "async/staleness_max": [max(worst, 0) if not rerolled else 0],
                "async/trainer_wait_s": [waited],
                "async/sampler_wait_s": [ready.sampler_wait_s],
                "async/rerolled_groups": [len(builders) if rerolled else 0],
            },
        )
        return result

    def close(self) -> None:
        """Stop the pipeline: the running batch is cancelled (its envs cleaned up), the sampler process stopped
        without waiting for a call in flight, the thread joined, the torch threads restored."""
        state, self._state = self._state, None
        if state is None:
            return
        if state.callback is not None:
            self.trainer.remove_callback(state.callback)
        try:
            state.pipeline.cancel()  # the batches stop; their envs are cleaned up
            state.sampler.close()  # a generate call in flight is not waited for (bounded: SamplerProcess.close)
            state.pipeline.close()  # so the batch that waited for it ends now and the thread joins
        finally:
            state.sampler.close()
            torch.set_num_threads(state.torch_threads)

    # -- the pipeline

    def _submit_next(self, state: _PipelineState) -> None:
        keys = next(state.keys)
        index = state.submitted
        state.pipeline.submit(
            RolloutJob(
                index,
                keys,
                [self.trainer.env_group(k) for k in keys],
                state.train_step_of(index) - self.trainer.args.max_staleness,
            )
        )
        state.submitted += 1

    def _start(self) -> _PipelineState:
        trainer, args = self.trainer, self.trainer.args
        policy = trainer.accelerator.unwrap_model(trainer.model_wrapped)
        mixed = trainer.accelerator.mixed_precision
        threads = torch.get_num_threads()
        trainer_threads, sampler_threads = split_cpu_threads(threads, next(policy.parameters()).device)
        with contextlib.ExitStack() as undo:  # a failed start leaves nothing running and the threads as they were
            torch.set_num_threads(trainer_threads)
            undo.callback(torch.set_num_threads, threads)
            sampler = SamplerProcess(
                policy,
                text_tokenizer(trainer.processing_class),
                version=trainer.state.global_step,
                sampling_settings=self.rollouts.sampling_settings(),
                autocast_dtype={"bf16": torch.bfloat16, "fp16": torch.float16}.get(mixed),
                num_threads=sampler_threads,
                seed=args.seed + trainer.accelerator.process_index,
                backend=args.resolved_sampler_backend(),
                continuous_batching_config=args.continuous_batching_options(),
            )
            undo.callback(sampler.close)
            pipeline = RolloutPipeline(
                VersionedSampler(sampler),
                dict(
                    **self.rollouts.options(),
                    sample_on_loop_thread=False,  # a call waits for the sampler process: the loop runs envs meanwhile
                ),
            )
            undo.pop_all()  # started: close() stops both and restores the threads
        micro = args.steps_per_generation * args.num_iterations
        ga = args.gradient_accumulation_steps
        state = _PipelineState(
            sampler,
            pipeline,
            self._future_group_keys(trainer.state.global_step * ga, micro),
            trainer.state.global_step,
            micro,
            ga,
            lookahead_batches(args.max_staleness, micro / ga),
            threads,
        )
        state.callback = _SyncWeights(state, args.weight_sync_steps)
        trainer.add_callback(state.callback)
        self._state = state
        return state

    def _future_group_keys(self, skip_micro_batches: int, micro_per_batch: int) -> Iterator[list[GroupKey]]:
        """The group keys of each coming generation batch, read from a second copy of the training dataloader (the
        same sampler and seed, so the same order as the trainer's), after the micro-batches already trained."""
        dataloader = self.trainer.get_train_dataloader()
        epoch, position = 0, 0
        while True:
            if hasattr(dataloader, "set_epoch"):
                dataloader.set_epoch(epoch)
            for batch in dataloader:
                if position >= skip_micro_batches and (position - skip_micro_batches) % micro_per_batch == 0:
                    yield keys_of_rows([row["prompt"] for row in batch], self.trainer.args.num_generations)
                position += 1
            epoch += 1


def check_async_supported(trainer, custom_sampler: Sampler | None = None) -> None:
    """Refuse, naming the option, setups the sampler copy cannot follow: ZeRO-3 and FSDP (parameters sharded across
    ranks), a custom sampler (its weights are not the policy's)."""
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    if plugin is not None and int(plugin.zero_stage) == 3:
        raise ValueError(
            "EnvGRPOConfig.max_staleness >= 1 is not supported with DeepSpeed ZeRO-3 (zero_stage: 3 in "
            "the accelerate/DeepSpeed config): the sampler's copy of the policy would need every "
            "parameter gathered. Use ZeRO-2 or DDP, or max_staleness=0 (docs/async.md)."
        )
    if trainer.is_fsdp_enabled:
        raise ValueError(
            "EnvGRPOConfig.max_staleness >= 1 is not supported with FSDP (the accelerate config's "
            "distributed_type: FSDP / --fsdp): the sampler's copy of the policy would need every parameter "
            "gathered. Use DDP or DeepSpeed ZeRO-2, or max_staleness=0 (docs/async.md)."
        )
    if custom_sampler is not None:
        raise ValueError(
            "EnvGRPOConfig.max_staleness >= 1 samples with a copy of the policy; it cannot be combined "
            "with a custom sampler (EnvGRPOTrainer(sampler=...)). Use max_staleness=0."
        )


__all__ = [
    "THREAD_NAME",
    "PipelinedRolloutSource",
    "SamplerProcess",
    "check_async_supported",
    "lookahead_batches",
    "split_cpu_threads",
]
