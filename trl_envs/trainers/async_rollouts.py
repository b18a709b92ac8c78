"""Rollouts that overlap training: bounded-staleness asynchronous GRPO (``EnvGRPOConfig.max_staleness >= 1``).

Contract (docs/async.md):

* A background thread (:data:`THREAD_NAME`, its own event loop) rolls out the trainer's next generation batches (the
  same groups, in the same order, as the synchronous trainer would roll out) while the trainer trains. It samples
  with :class:`SamplerWeights`: a copy of the policy's *trainable* parameters (frozen ones, e.g. a LoRA base, are
  shared, not copied), refreshed from the policy after every ``weight_sync_steps`` optimizer steps. The version of
  the weights is the optimizer step they were taken at.
* A batch records the oldest and newest weight version it sampled with. The pipeline starts a batch only once the
  sampler's weights are at least ``predicted train step - max_staleness``, so every group is trained at most
  ``max_staleness`` optimizer steps after the weights that sampled its oldest token. A batch found older anyway (a
  step the schedule did not predict) is re-rolled by the policy itself before training, on every rank together, and
  counted (``async/rerolled_groups``): stale groups are never trained.
* Batches whose weights are ready roll out concurrently on the background loop; the trainer's ``training_step``
  and the sampler's ``generate`` calls take turns on the device (:class:`ComputeTurn`, the sampler first), so what
  overlaps the trainer's compute is env time.
* Sampling logprobs vs the trained policy's are corrected by TRL's own importance-sampling path
  (``trl_seam.sampler_importance_sampling``: per-token truncated ratio by default; with one optimizer pass per batch
  the policy logprobs are the loss forward's own, ``trl_seam.ratio_from_loss_logprobs``).
* The pipeline is started at the first training rollout (after a checkpoint was loaded, so a resumed run starts
  from the checkpoint's weights) and stopped when ``train()`` returns or raises (Ctrl-C, an env error): the running
  batch is cancelled (its envs' cleanup runs) and the thread is joined.
* Distributed: the thread makes no collective call (its sampler is a plain module, not the DDP / DeepSpeed wrapper);
  every collective (the staleness check, metrics) is made by the main thread at the same point on every rank. ZeRO-3
  and FSDP shard the parameters the copy would need and are refused when training starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import math
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import TrainerCallback

from ..core.types import EnvGroupBuilder
from ..rollout.engine import RolloutBatchResult, run_rollout_batch_async
from ..rollout.event_loop import cyclic_gc_paused
from ..samplers.hf import HFSampler
from . import trl_seam

THREAD_NAME = "trl_envs-async-rollouts"
JOIN_TIMEOUT_S = 60.0  # the running batches are cancelled first; an env that ignores cancellation gets this long
RESERVE_S = 0.1  # how long the trainer waits for a batch just started to make its first generate call


# -- the sampler's weights ---------------------------------------------------------------------------------------------

class SamplerWeights:
    """A copy of ``policy`` to sample with while ``policy`` trains, and the optimizer step its weights are from.

    Only trainable parameters are copied (frozen ones, a LoRA base model's, are shared with the policy: they never
    change); buffers are copied. :meth:`stage` (trainer thread) snapshots the policy's trainable parameters into a
    staging buffer; :meth:`apply` (sampler thread, between generate calls) moves a newer snapshot into the copy, so a
    generate call never sees weights change under it and the trainer never waits for one. Memory: two extra copies of
    the trainable parameters (the sampler's and the staging buffer).
    """

    def __init__(self, policy: torch.nn.Module, version: int):
        frozen = {id(p): p for p in policy.parameters() if not p.requires_grad}
        self.model = copy.deepcopy(policy, memo=dict(frozen))
        self.model.eval()
        names = [n for n, p in policy.named_parameters() if p.requires_grad]
        live = dict(policy.named_parameters())
        mine = dict(self.model.named_parameters())
        self._live = [live[n] for n in names]
        self._mine = [mine[n] for n in names]
        for p in self._mine:
            p.requires_grad_(False)
        self._staged = [p.detach().clone() for p in self._live]
        self._lock = threading.Lock()
        self.version = version
        self.staged_version = version

    @property
    def num_copied_parameters(self) -> int:
        return sum(p.numel() for p in self._mine)

    def stage(self, version: int) -> None:
        """Snapshot the policy's trainable weights as ``version`` (call from the training thread, between steps)."""
        with self._lock, torch.no_grad():
            torch._foreach_copy_(self._staged, [p.detach() for p in self._live])
            self.staged_version = version

    def apply(self) -> int:
        """Load the latest snapshot into the sampling copy if it is newer; return the copy's version."""
        with self._lock:
            if self.staged_version != self.version:
                with torch.no_grad():
                    torch._foreach_copy_(self._mine, self._staged)
                self.version = self.staged_version
            return self.version


class ComputeTurn:
    """The device's compute, taken in turns by the trainer (a whole ``training_step``: scoring, forward, backward) and
    the sampler (one ``generate`` call), the sampler first: a waiting or announced (:meth:`reserve`) ``generate`` call
    goes before the trainer's next step. What overlaps is everything else: env time (tool calls, judges, env servers)
    runs while the trainer computes. Both sides computing at once on one device made each slower than taking turns
    (measured on CPU: bench/async_rollouts.py, docs/async.md). The sampler is at most ``max_staleness`` batches ahead,
    so its priority cannot starve the trainer."""

    def __init__(self):
        self._cond = threading.Condition()
        self._holder: int | None = None
        self._sampler_waiting = 0
        self._reserved_until = 0.0

    def reserve(self) -> None:
        """Announce that the sampler is about to start a batch: the trainer lets it generate first (for at most
        :data:`RESERVE_S`, in case the batch's envs take long to set up)."""
        with self._cond:
            self._reserved_until = time.perf_counter() + RESERVE_S

    def unreserve(self) -> None:
        with self._cond:
            self._reserved_until = 0.0
            self._cond.notify_all()

    @contextlib.contextmanager
    def sampler(self) -> Iterator[None]:
        with self._cond:
            self._sampler_waiting += 1
            try:
                while self._holder is not None:
                    self._cond.wait()
            finally:
                self._sampler_waiting -= 1
            self._holder, self._reserved_until = threading.get_ident(), 0.0
        try:
            yield
        finally:
            self._release()

    @contextlib.contextmanager
    def trainer(self) -> Iterator[None]:
        self._trainer_acquire()
        try:
            yield
        finally:
            self._release()

    @contextlib.contextmanager
    def yielded(self) -> Iterator[None]:
        """Let the sampler compute while this thread waits (a no-op where this thread does not hold the turn)."""
        if self._holder != threading.get_ident():
            yield
            return
        self._release()
        try:
            yield
        finally:
            self._trainer_acquire()

    def let_sampler_in(self) -> None:
        """If a ``generate`` call is waiting, let it run now (the trainer holding the turn calls this between its
        forward and backward pass, so a batch in flight is not held up by a whole training step)."""
        if self._holder == threading.get_ident() and self._sampler_waiting:
            self._release()
            self._trainer_acquire()

    def _trainer_acquire(self) -> None:
        with self._cond:
            while self._holder is not None or self._sampler_waiting or time.perf_counter() < self._reserved_until:
                self._cond.wait(0.01)  # timed: a reservation expires
            self._holder = threading.get_ident()

    def _release(self) -> None:
        with self._cond:
            self._holder = None
            self._cond.notify_all()


class VersionedSampler:
    """A :class:`~trl_envs.samplers.base.Sampler` on :class:`SamplerWeights`: each call takes its
    :class:`ComputeTurn`, first loads the newest staged weights, and records their version in the calling batch's
    list (:meth:`for_batch`)."""

    def __init__(self, sampler: HFSampler, weights: SamplerWeights, turn: ComputeTurn):
        self.sampler, self.weights, self.turn = sampler, weights, turn
        self._lock = threading.Lock()  # a call forced by the batcher's valve may come from another thread

    def sample(self, requests, versions: list[int] | None = None):
        with self._lock, self.turn.sampler():
            version = self.weights.apply()
            if versions is not None:
                versions.append(version)
            return self.sampler.sample(requests)

    def for_batch(self, versions: list[int]):
        """A sampler for one batch that records the weight version of each of its calls in ``versions``."""
        return _BatchSampler(self, versions)


class _BatchSampler:
    def __init__(self, sampler: VersionedSampler, versions: list[int]):
        self._sampler, self._versions = sampler, versions

    def sample(self, requests):
        return self._sampler.sample(requests, self._versions)


# -- the pipeline -------------------------------------------------------------------------------------------------------

@dataclass
class RolloutJob:
    """One generation batch to roll out: its group keys and builders, and the oldest weights it may sample with."""

    index: int
    keys: list[str]
    builders: list[EnvGroupBuilder]
    min_version: int


@dataclass
class ReadyBatch:
    """A finished job: the rollout (or the error it raised) and the weight versions it sampled with."""

    job: RolloutJob
    result: RolloutBatchResult | None = None
    error: BaseException | None = None
    versions: list[int] = field(default_factory=list)
    sampler_wait_s: float = 0.0

    @property
    def oldest_version(self) -> int:
        return min(self.versions) if self.versions else self.job.min_version


class RolloutPipeline:
    """Runs :class:`RolloutJob` s on a background thread with its own event loop: every submitted job whose weights
    are ready (``staged_version >= job.min_version``) starts at once, so the env waits of consecutive batches overlap
    too; their ``generate`` calls take turns (:class:`VersionedSampler`).

    Args:
        sampler: the :class:`VersionedSampler` every batch samples with.
        rollout_kwargs: budget, strategy and max_wait_s of :func:`~trl_envs.rollout.engine.run_rollout_batch_async`.
    """

    def __init__(self, sampler: VersionedSampler, rollout_kwargs: dict[str, Any]):
        self.sampler = sampler
        self.rollout_kwargs = rollout_kwargs
        self._cond = threading.Condition()
        self._jobs: list[RolloutJob] = []
        self._ready: dict[int, ReadyBatch] = {}
        self._stop = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._crash: BaseException | None = None
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), name=THREAD_NAME, daemon=True)
        self.thread.start()
        started.wait()

    # trainer side
    def submit(self, job: RolloutJob) -> None:
        with self._cond:
            self._jobs.append(job)
        self._poke()

    def weights_changed(self) -> None:
        self._poke()

    def _poke(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(wake.set)

    def take(self, index: int) -> ReadyBatch:
        """Block until job ``index`` is done; re-raise its error (or the thread's) in the caller."""
        with self._cond:
            while index not in self._ready:
                if self._crash is not None:
                    raise RuntimeError(f"{THREAD_NAME} stopped unexpectedly") from self._crash
                if self._stop or not self.thread.is_alive():
                    raise RuntimeError(f"{THREAD_NAME} is stopped; batch {index} will not be rolled out")
                self._cond.wait(0.1)  # a timed wait: Ctrl-C reaches the trainer thread promptly
            ready = self._ready.pop(index)
        if ready.error is not None:
            raise ready.error
        return ready

    def close(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Stop: cancel the running batches (their envs are cleaned up), drop queued jobs, join the thread."""
        with self._cond:
            self._stop = True
            self._jobs.clear()
            self._cond.notify_all()
        self._poke()
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            warnings.warn(f"{THREAD_NAME} did not stop within {timeout_s:.0f} s of being cancelled: an env or sampler "
                          "call is blocking and ignores cancellation. It is a daemon thread and ends with the process.",
                          stacklevel=2)

    # sampler-thread side
    def _run(self, started: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop, self._wake = loop, asyncio.Event()
        started.set()
        try:
            loop.run_until_complete(self._main())
        except BaseException as crash:  # noqa: BLE001
            with self._cond:
                self._crash = crash
                self._cond.notify_all()
        finally:
            self._loop = None
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self.sampler.turn.unreserve()

    async def _main(self) -> None:
        running: set[asyncio.Task] = set()
        idle_since = [time.perf_counter()]  # when the last running batch ended: the sampler's idle time starts

        def finished(task: asyncio.Task) -> None:
            running.discard(task)
            if not running:
                idle_since[0] = time.perf_counter()
            self._wake.set()

        try:
            while True:
                with self._cond:
                    if self._stop:
                        return
                    startable = []
                    while self._jobs and self.sampler.weights.staged_version >= self._jobs[0].min_version:
                        startable.append(self._jobs.pop(0))
                for job in startable:
                    waited = 0.0 if running else time.perf_counter() - idle_since[0]
                    self.sampler.turn.reserve()  # its first generate call goes before the trainer's next step
                    task = asyncio.ensure_future(self._one(job, waited))
                    running.add(task)
                    task.add_done_callback(finished)
                await self._wake.wait()
                self._wake.clear()
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _one(self, job: RolloutJob, sampler_wait_s: float) -> None:
        ready = ReadyBatch(job, sampler_wait_s=sampler_wait_s)
        try:
            with cyclic_gc_paused():  # while a batch runs, as in the synchronous rollout (see cyclic_gc_paused)
                ready.result = await run_rollout_batch_async(job.builders, self.sampler.for_batch(ready.versions),
                                                             **self.rollout_kwargs)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # noqa: BLE001 - delivered to the trainer thread by take()
            ready.error = error
        with self._cond:
            self._ready[job.index] = ready
            self._cond.notify_all()


# -- the trainer side ---------------------------------------------------------------------------------------------------

class _SyncWeights(TrainerCallback):
    def __init__(self, state: _AsyncState, every: int):
        self.state, self.every = state, every

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            self.state.weights.stage(state.global_step)
            self.state.pipeline.weights_changed()


def lookahead_batches(max_staleness: int, steps_per_batch: float) -> int:
    """How many generation batches the pipeline is given ahead of the one being trained."""
    return max(1, math.ceil(max_staleness / steps_per_batch))


@dataclass
class _AsyncState:
    turn: ComputeTurn
    weights: SamplerWeights
    pipeline: RolloutPipeline
    keys: Iterator[list[str]]
    start_step: int
    micro_per_batch: int  # micro-steps (training_step calls) per generation batch
    grad_accum: int
    lookahead: int
    submitted: int = 0
    consumed: int = 0
    callback: TrainerCallback | None = None

    def train_step_of(self, index: int) -> int:
        return self.start_step + (index * self.micro_per_batch) // self.grad_accum


class AsyncRolloutsMixin:
    """Bounded-staleness rollouts for ``EnvGRPOTrainer`` (mixed in before ``GRPOTrainer``; module docstring).

    Attributes:
        async_batches: one record per trained generation batch with ``max_staleness >= 1``: ``step`` (optimizer step
            it was trained at), ``oldest_version`` / ``newest_version`` (weights it was sampled with; after a re-roll,
            the current step), ``rerolled`` (it was too stale and was rolled out again), ``groups`` (its group keys).
    """

    _async: _AsyncState | None = None

    def train(self, *args, **kwargs):
        if self.args.max_staleness:
            check_async_supported(self)
        self.async_batches = []
        try:
            return super().train(*args, **kwargs)
        finally:
            self._close_async_rollouts()

    def training_step(self, *args, **kwargs):
        state = self._async
        if state is None or not self.model.training:
            return super().training_step(*args, **kwargs)
        with state.turn.trainer():  # the sampler generates between training steps, and while the trainer waits for it
            return super().training_step(*args, **kwargs)

    def compute_loss(self, *args, **kwargs):
        loss = super().compute_loss(*args, **kwargs)
        if self._async is not None and self.model.training:
            self._async.turn.let_sampler_in()
        return loss

    # -- rollouts

    def _async_rollout(self, keys: list[str], builders: Sequence[EnvGroupBuilder]) -> RolloutBatchResult:
        """The rollout of this generation batch's groups ``keys``, taken from the pipeline (started on first use)."""
        state = self._async or self._start_async_rollouts()
        while state.submitted <= state.consumed + state.lookahead:
            self._submit_next(state)
        waited = time.perf_counter()
        with state.turn.yielded():
            ready = state.pipeline.take(state.consumed)
        waited = time.perf_counter() - waited
        state.consumed += 1
        if ready.job.keys != list(keys):
            raise RuntimeError(f"EnvGRPOTrainer (max_staleness={self.args.max_staleness}): the pipeline rolled out "
                               f"groups {ready.job.keys} but the trainer asked for {list(keys)}; the data order is "
                               "not one the pipeline can predict (an IterableDataset with shuffling?). Use "
                               "max_staleness=0 for this dataset.")
        step = self.state.global_step
        staleness = step - ready.oldest_version
        worst = staleness
        if self.accelerator.num_processes > 1:
            worst = int(self.accelerator.gather(torch.tensor([staleness], device=self.accelerator.device)).max())
        result, rerolled = ready.result, worst > self.args.max_staleness
        oldest, newest = ready.oldest_version, max(ready.versions, default=ready.oldest_version)
        if rerolled:  # every rank re-rolls together: the policy's own rollout may be a collective
            result = self._rollout(builders)
            staleness, oldest, newest = 0, step, step
        self.async_batches.append(dict(step=step, oldest_version=oldest, newest_version=newest, rerolled=rerolled,
                                       groups=list(keys)))
        trl_seam.record_mean_metrics(self, "train", {
            "async/staleness": [staleness], "async/staleness_max": [max(worst, 0) if not rerolled else 0],
            "async/trainer_wait_s": [waited], "async/sampler_wait_s": [ready.sampler_wait_s],
            "async/rerolled_groups": [len(builders) if rerolled else 0]})
        self.last_rollout = result
        return result

    def _submit_next(self, state: _AsyncState) -> None:
        keys = next(state.keys)
        index = state.submitted
        state.pipeline.submit(RolloutJob(index, keys, [self._builder(k) for k in keys],
                                         state.train_step_of(index) - self.args.max_staleness))
        state.submitted += 1

    def _start_async_rollouts(self) -> _AsyncState:
        args = self.args
        policy = self.accelerator.unwrap_model(self.model_wrapped)
        weights = SamplerWeights(policy, self.state.global_step)

        @contextlib.contextmanager
        def sampling_model():
            with self.accelerator.autocast():
                yield weights.model

        turn = ComputeTurn()
        sampler = VersionedSampler(HFSampler(weights.model, trl_seam.tokenizer_of(self), model_context=sampling_model,
                                             **self.sampling_settings()), weights, turn)
        pipeline = RolloutPipeline(sampler, dict(budget=args.rollout_budget(self.model), strategy=args.error_strategy(),
                                                 max_wait_s=args.sampler_max_wait_s))
        micro = args.steps_per_generation * self.num_iterations
        ga = args.gradient_accumulation_steps
        state = _AsyncState(turn, weights, pipeline, self._future_group_keys(self.state.global_step * ga, micro),
                            self.state.global_step, micro, ga, lookahead_batches(args.max_staleness, micro / ga))
        state.callback = _SyncWeights(state, args.weight_sync_steps)
        self.add_callback(state.callback)
        self._async = state
        return state

    def _future_group_keys(self, skip_micro_batches: int, micro_per_batch: int) -> Iterator[list[str]]:
        """The group keys of each coming generation batch, read from a second copy of the training dataloader (the
        same sampler and seed, so the same order as the trainer's), after the micro-batches already trained."""
        dataloader = self.get_train_dataloader()
        epoch, position = 0, 0
        while True:
            if hasattr(dataloader, "set_epoch"):
                dataloader.set_epoch(epoch)
            for batch in dataloader:
                if position >= skip_micro_batches and (position - skip_micro_batches) % micro_per_batch == 0:
                    yield [row["prompt"] for row in batch][::self.num_generations]
                position += 1
            epoch += 1

    def _close_async_rollouts(self) -> None:
        state, self._async = self._async, None
        if state is None:
            return
        if state.callback is not None:
            self.remove_callback(state.callback)
        state.pipeline.close()

    # -- off-policy correction (TRL's importance-sampling path)

    def _async_correction_on(self) -> bool:
        return bool(self.args.max_staleness) and self.args.async_importance_sampling != "none" and self.model.training

    def _ratio_in_loss(self) -> bool:
        """One optimizer pass per generation batch: TRL keeps no ``old_per_token_logps`` (they would equal the loss
        forward's), so the ratio is taken from the loss forward instead of an extra scoring pass."""
        return self.args.gradient_accumulation_steps % (self.args.steps_per_generation * self.num_iterations) == 0

    def _generate_and_score_completions(self, inputs):
        if not self._async_correction_on() or self._ratio_in_loss():
            return super()._generate_and_score_completions(inputs)
        args = self.args
        with trl_seam.sampler_importance_sampling(self, args.async_importance_sampling,
                                                  args.vllm_importance_sampling_clip_min,
                                                  args.vllm_importance_sampling_clip_max):
            output = super()._generate_and_score_completions(inputs)
        self._record_importance_weights(output["importance_sampling_ratio"], _trained_mask(output))
        return output

    def _compute_loss(self, model, inputs):
        if not self._async_correction_on():
            return super()._compute_loss(model, inputs)
        args = self.args
        if "importance_sampling_ratio" in inputs:  # computed by TRL's scoring
            with trl_seam.sampler_importance_sampling(self, args.async_importance_sampling,
                                                      args.vllm_importance_sampling_clip_min,
                                                      args.vllm_importance_sampling_clip_max):
                return super()._compute_loss(model, inputs)
        if "sampling_per_token_logps" not in inputs:
            raise RuntimeError("EnvGRPOTrainer (max_staleness >= 1): the batch has no sampling logprobs to correct with")

        def make_ratio(policy_logps: torch.Tensor) -> torch.Tensor:
            mask = _trained_mask(inputs)
            ratio = importance_ratio(policy_logps, inputs["sampling_per_token_logps"], mask,
                                     args.async_importance_sampling, args.vllm_importance_sampling_clip_min,
                                     args.vllm_importance_sampling_clip_max)
            self._record_importance_weights(ratio, mask)
            return ratio

        with trl_seam.ratio_from_loss_logprobs(self, inputs, make_ratio):
            return super()._compute_loss(model, inputs)

    def _record_importance_weights(self, ratio: torch.Tensor, mask: torch.Tensor) -> None:
        args = self.args
        if ratio.size(1) == 1:  # sequence modes: one ratio per row
            mask = (mask.sum(1, keepdim=True) > 0).to(mask.dtype)
        if args.async_importance_sampling.endswith("_mask"):
            clipped = ratio == 0
        elif args.vllm_importance_sampling_clip_max is not None:
            clipped = ratio >= args.vllm_importance_sampling_clip_max
        else:
            clipped = torch.zeros_like(ratio, dtype=torch.bool)
        n = float(mask.sum())
        trl_seam.record_mean_metrics(self, "train", {
            "async/importance_weight_mean": [float((ratio * mask).sum()) / n] if n else [],
            "async/importance_weight_clip_fraction": [float((clipped * mask).sum()) / n] if n else []})


def _trained_mask(batch: dict) -> torch.Tensor:
    mask = batch["completion_mask"]
    return mask * batch["tool_mask"] if "tool_mask" in batch else mask


def importance_ratio(policy_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor, mode: str,
                     clip_min: float | None, clip_max: float | None) -> torch.Tensor:
    """TRL's importance-sampling ratio of the policy vs the sampler (``GRPOTrainer._generate_and_score_completions``
    with ``vllm_importance_sampling_correction``): ``exp(policy - sampling)`` on trained tokens (1 elsewhere and where
    a sampling logprob is NaN), per token or summed per sequence (``mode`` ``token_*`` / ``sequence_*``), truncated
    to ``[clip_min, clip_max]`` (``*_truncate``) or zeroed outside it (``*_mask``). Shape (B, T) or (B, 1)."""
    diff = torch.nan_to_num((policy_logps - sampling_logps) * mask, nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("_truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = clip_min if clip_min is not None else -math.inf
    high = clip_max if clip_max is not None else math.inf
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def check_async_supported(trainer) -> None:
    """Refuse, naming the option, setups the sampler copy cannot follow: ZeRO-3 and FSDP (parameters sharded across
    ranks), a custom sampler (its weights are not the policy's)."""
    plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
    if plugin is not None and int(plugin.zero_stage) == 3:
        raise ValueError("EnvGRPOConfig.max_staleness >= 1 is not supported with DeepSpeed ZeRO-3 (zero_stage: 3 in "
                         "the accelerate/DeepSpeed config): the sampler's copy of the policy would need every "
                         "parameter gathered. Use ZeRO-2 or DDP, or max_staleness=0 (docs/async.md).")
    if trainer.is_fsdp_enabled:
        raise ValueError("EnvGRPOConfig.max_staleness >= 1 is not supported with FSDP (the accelerate config's "
                         "distributed_type: FSDP / --fsdp): the sampler's copy of the policy would need every parameter "
                         "gathered. Use DDP or DeepSpeed ZeRO-2, or max_staleness=0 (docs/async.md).")
    if trainer.custom_sampler is not None:
        raise ValueError("EnvGRPOConfig.max_staleness >= 1 samples with a copy of the policy; it cannot be combined "
                         "with a custom sampler (EnvGRPOTrainer(sampler=...)). Use max_staleness=0.")


__all__ = ["AsyncRolloutsMixin", "ReadyBatch", "RolloutJob", "RolloutPipeline", "SamplerWeights", "THREAD_NAME",
           "VersionedSampler", "check_async_supported", "importance_ratio", "lookahead_batches"]
