"""Rollouts overlapping training (``EnvGRPOConfig.max_staleness``): the staleness bound read from the recorded weight
versions, stale batches re-rolled and counted, TRL's importance-sampling correction, ``max_staleness=0`` untouched,
resume from a checkpoint's weights, Ctrl-C and env errors stopping both sides, and the setups refused at start.
The 2-process runs (DDP, DeepSpeed ZeRO-2) are scenarios of tests/test_distributed.py's launches.

CI time: about 80 s on 2 CPU cores (each run starts a sampler process: a few seconds).
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import threading
import types

import pytest
import torch
from cpu_configs import cpu_grpo_config
from transformers import TrainerCallback

from trl_envs import (
    EnvGroupBuilder,
    EnvGRPOConfig,
    EnvGRPOTrainer,
    MessageEnv,
    MessageStepResult,
    MessageTokenEnv,
    RLDataset,
    make_env_dataset,
)
from trl_envs.rollout.async_pipeline import RolloutPipeline
from trl_envs.trainers import async_rollouts
from trl_envs.trainers.async_rollouts import THREAD_NAME, SamplerProcess, check_async_supported

pytestmark = pytest.mark.timeout(300)


def config(tmp_path, **overrides) -> EnvGRPOConfig:
    defaults = dict(max_steps=4, max_completion_length=6, max_turns=3, disable_tqdm=True, max_staleness=1)
    return cpu_grpo_config(tmp_path, **{**defaults, **overrides})


def guess_number(renderer, num_batches=20):
    return make_env_dataset("guess_number", renderer, group_size=4, batch_size=2, num_batches=num_batches)


def async_threads() -> list[threading.Thread]:
    """The pipeline's thread and the sampler process, where either is still running."""
    return [t for t in threading.enumerate() if t.name == THREAD_NAME] + multiprocessing.active_children()


def logged(trainer, name: str) -> list[float]:
    return [h[name] for h in trainer.state.log_history if name in h]


class WaitingEnv(MessageEnv):
    """Two turns, each waiting ``wait_s`` on "I/O"; raises at the given batch when asked to."""

    def __init__(self, wait_s: float, fail: bool):
        self.wait_s, self.fail, self.t = wait_s, fail, 0

    async def initial_messages(self):
        return [{"role": "user", "content": "Say something."}]

    async def step(self, response):
        await asyncio.sleep(self.wait_s)
        if self.fail:
            raise ConnectionError("the env's server went away")
        self.t += 1
        done = self.t >= 2
        return MessageStepResult(
            float(len(response.message["content"]) % 3), done, [] if done else [{"role": "user", "content": "More."}]
        )


class Counting:
    def __init__(self):
        self.made = self.cleaned = 0


def waiting_dataset(renderer, counts: Counting, wait_s=0.05, fail_at_batch=None, num_batches=20):
    class Group(EnvGroupBuilder):
        def __init__(self, batch: int):
            self.batch = batch

        async def make_envs(self):
            counts.made += 1
            return [MessageTokenEnv(WaitingEnv(wait_s, self.batch == fail_at_batch), renderer) for _ in range(4)]

        async def cleanup(self):
            counts.cleaned += 1

    class Dataset(RLDataset):
        def get_batch(self, index):
            return [Group(index), Group(index)]

        def __len__(self):
            return num_batches

    return Dataset()


# -- the staleness bound, from the recorded weight versions ---------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2])
def test_staleness_never_exceeds_k_and_rollouts_overlap(k, tmp_path, tiny_model_path, tokenizer, renderer):
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, max_staleness=k, max_steps=5),
        guess_number(renderer),
        processing_class=tokenizer,
    )
    trainer.train()
    batches = trainer.async_batches
    assert [b["step"] for b in batches] == [0, 1, 2, 3, 4]
    assert all(0 <= b["step"] - b["oldest_version"] <= k for b in batches), batches
    assert any(b["oldest_version"] < b["step"] for b in batches), "no batch was sampled ahead of training"
    assert not any(b["rerolled"] for b in batches)
    assert max(logged(trainer, "async/staleness_max")) <= k
    assert logged(trainer, "async/rerolled_groups") == [0.0] * 5
    for name in (
        "async/trainer_wait_s",
        "async/sampler_wait_s",
        "async/importance_weight_mean",
        "async/importance_weight_clip_fraction",
    ):
        assert len(logged(trainer, name)) == 5, name
    # the first batch is sampled by weights equal to the policy's: the importance weights are 1 there, later not
    weights = logged(trainer, "async/importance_weight_mean")
    assert weights[0] == pytest.approx(1.0, abs=1e-4) and any(abs(w - 1.0) > 1e-3 for w in weights[1:])
    assert not async_threads()


def test_several_passes_per_batch_use_trl_scoring_logprobs(tmp_path, tiny_model_path, tokenizer, renderer):
    """num_iterations=2: two optimizer steps per generation batch, so TRL keeps the scoring-time logprobs and the ratio
    is taken from them (the first batch was sampled by the policy itself: weight 1); the bound holds."""
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, max_steps=6, num_iterations=2),
        guess_number(renderer),
        processing_class=tokenizer,
    )
    trainer.train()
    batches = trainer.async_batches
    assert [b["step"] for b in batches] == [0, 2, 4]
    assert all(0 <= b["step"] - b["oldest_version"] <= 1 for b in batches)
    assert any(b["oldest_version"] < b["step"] for b in batches)
    weights = logged(trainer, "async/importance_weight_mean")
    assert len(weights) == 3 and weights[0] == pytest.approx(1.0, abs=1e-4)


def test_stale_batches_are_rerolled_and_counted(tmp_path, tiny_model_path, tokenizer, renderer, monkeypatch):
    """The pipeline's gate is switched off and it may run 3 batches ahead: batches sampled more than k steps before
    they are trained are rolled out again by the current policy, counted, and never trained stale."""
    monkeypatch.setattr(async_rollouts, "lookahead_batches", lambda k, steps: 3)
    submit = RolloutPipeline.submit
    monkeypatch.setattr(  # no gate: every job may sample with any weights
        RolloutPipeline, "submit", lambda self, job: submit(self, dataclasses.replace(job, min_version=-100))
    )
    trainer = EnvGRPOTrainer(
        tiny_model_path, config(tmp_path, max_steps=5), guess_number(renderer), processing_class=tokenizer
    )
    trainer.train()
    batches = trainer.async_batches
    assert any(b["rerolled"] for b in batches), batches
    assert all(b["step"] - b["oldest_version"] <= 1 for b in batches)  # what was trained
    rerolled = logged(trainer, "async/rerolled_groups")
    assert rerolled == [2.0 if b["rerolled"] else 0.0 for b in batches]  # 2 groups per batch


def test_importance_weights_truncated_at_the_cap(tmp_path, tiny_model_path, tokenizer, renderer):
    """A cap below 1 truncates every token's ratio of the first batch (sampled by weights equal to the policy's, ratio
    1): the clip fraction shows it and the weights' mean is the cap (TRL's truncation of the sampler copy's ratio)."""
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, max_steps=2, vllm_importance_sampling_clip_max=0.5),
        guess_number(renderer),
        processing_class=tokenizer,
    )
    trainer.train()
    clip, mean = (
        logged(trainer, "async/importance_weight_clip_fraction"),
        logged(trainer, "async/importance_weight_mean"),
    )
    assert clip[0] == 1.0 and mean[0] == pytest.approx(0.5)
    assert 0.5 < clip[1] <= 1.0 and mean[1] <= 0.5


def test_max_staleness_zero_is_the_synchronous_path(tmp_path, tiny_model_path, tokenizer, renderer, monkeypatch):
    def no_pipeline(*args, **kwargs):
        raise AssertionError("the async pipeline was used with max_staleness=0")

    monkeypatch.setattr(RolloutPipeline, "__init__", no_pipeline)
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, max_staleness=0, max_steps=2),
        guess_number(renderer),
        processing_class=tokenizer,
    )
    trainer.train()
    keys = {k for h in trainer.state.log_history for k in h}
    assert not {k for k in keys if k.startswith(("async/", "sampling/importance_sampling_ratio"))}
    assert trainer.async_batches == [] and not async_threads()
    assert not trainer.use_vllm


# -- resume, Ctrl-C, env errors ---------------------------------------------------------------------------------------


def test_resume_restarts_the_pipeline_from_the_checkpoint_weights(tmp_path, tiny_model_path, tokenizer, renderer):
    first = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, max_steps=4, save_strategy="steps", save_steps=2),
        guess_number(renderer),
        processing_class=tokenizer,
    )
    first.train()
    resumed = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, max_steps=4, save_strategy="no"),
        guess_number(renderer),
        processing_class=tokenizer,
    )
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-2"))
    assert [b["step"] for b in resumed.async_batches] == [2, 3]
    assert resumed.async_batches[0]["oldest_version"] == 2
    # the groups are those the uninterrupted run trained at steps 2 and 3, and the sampler copy holds the
    # checkpoint's weights: the importance weights of the first batch after resuming are 1
    assert [b["groups"] for b in resumed.async_batches] == [b["groups"] for b in first.async_batches[2:]]
    assert logged(resumed, "async/importance_weight_mean")[0] == pytest.approx(1.0, abs=1e-4)


def test_ctrl_c_stops_the_pipeline_and_cleans_up_envs(tmp_path, tiny_model_path, tokenizer, renderer):
    class Interrupt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                raise KeyboardInterrupt

    counts = Counting()
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, max_steps=10, max_staleness=2),
        waiting_dataset(renderer, counts, wait_s=0.2),
        processing_class=tokenizer,
        callbacks=[Interrupt()],
    )
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    assert not async_threads()
    assert counts.made >= 6 and counts.cleaned == counts.made  # the batch running ahead was cancelled and cleaned up
    assert not trainer.async_rollouts_running


def test_env_error_in_the_pipeline_reaches_the_trainer(tmp_path, tiny_model_path, tokenizer, renderer):
    counts = Counting()
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, max_steps=6),
        waiting_dataset(renderer, counts, wait_s=0.01, fail_at_batch=2),
        processing_class=tokenizer,
    )
    with pytest.raises(ConnectionError, match="went away"):
        trainer.train()
    assert len(trainer.async_batches) == 2  # batches 0 and 1 trained, batch 2's error stopped training
    assert not async_threads()
    assert counts.cleaned == counts.made


# -- what is refused, and the sampler copy -----------------------------------------------------------------------------


def test_bad_settings_are_refused_naming_the_option(tmp_path):
    with pytest.raises(ValueError, match="max_staleness must be an integer >= 0"):
        config(tmp_path, max_staleness=-1)
    with pytest.raises(ValueError, match="weight_sync_steps"):
        config(tmp_path, weight_sync_steps=0)
    with pytest.raises(ValueError, match="async_importance_sampling"):
        config(tmp_path, async_importance_sampling="sequence")
    with pytest.raises(ValueError, match="use_vllm"):
        config(tmp_path, use_vllm=True)


@pytest.mark.parametrize("stage, fsdp, match", [(3, False, "ZeRO-3"), (None, True, "FSDP")])
def test_zero3_and_fsdp_are_refused_at_start(stage, fsdp, match):
    plugin = None if stage is None else types.SimpleNamespace(zero_stage=stage)
    trainer = types.SimpleNamespace(
        accelerator=types.SimpleNamespace(state=types.SimpleNamespace(deepspeed_plugin=plugin)),
        is_fsdp_enabled=fsdp,
        custom_sampler=None,
    )
    with pytest.raises(ValueError, match=match):
        check_async_supported(trainer)
    trainer.is_fsdp_enabled, trainer.accelerator.state.deepspeed_plugin = False, types.SimpleNamespace(zero_stage=2)
    check_async_supported(trainer)  # ZeRO-2 and DDP are supported


def test_lora_copies_only_the_adapter(tmp_path, tiny_model_path, tokenizer, renderer, monkeypatch):
    peft = pytest.importorskip("peft")
    made: list[SamplerProcess] = []
    original = SamplerProcess.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(SamplerProcess, "__init__", recording)
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, max_steps=3, beta=0.01, credit_assignment="per_turn"),
        guess_number(renderer),
        processing_class=tokenizer,
        peft_config=peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
    )
    trainer.train()
    adapter = sum(p.numel() for n, p in trainer.model.named_parameters() if "lora_" in n)
    assert len(made) == 1 and made[0].num_copied_parameters == adapter > 0
    assert all(0 <= b["step"] - b["oldest_version"] <= 1 for b in trainer.async_batches)


def test_on_cpu_the_trainer_and_the_sampler_process_split_the_threads(tmp_path, tiny_model_path, tokenizer, renderer):
    """Both compute at once on CPU: each with all of torch's threads would oversubscribe the cores. The trainer keeps
    the larger half while the pipeline runs, the sampler process gets the rest, and the setting is restored."""
    assert async_rollouts.split_cpu_threads(4, torch.device("cpu")) == (2, 2)
    assert async_rollouts.split_cpu_threads(3, torch.device("cpu")) == (2, 1)
    assert async_rollouts.split_cpu_threads(1, torch.device("cpu")) == (1, 1)
    assert async_rollouts.split_cpu_threads(8, torch.device("cuda", 0)) == (8, 8)

    seen: list[int] = []

    class Threads(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            seen.append(torch.get_num_threads())

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        trainer = EnvGRPOTrainer(
            tiny_model_path,
            config(tmp_path, max_steps=2),
            guess_number(renderer),
            processing_class=tokenizer,
            callbacks=[Threads()],
        )
        trainer.train()
        assert seen == [1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
