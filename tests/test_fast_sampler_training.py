"""Training with the fast in-process samplers (``EnvGRPOConfig.sampler_backend``) on the CPU: the trainer builds the
chosen backend, continuous batching streams every turn's request, and with ``max_staleness=1`` the sampler process
samples with the same backend (its first batch's importance weights are 1: its logprobs are the policy's)."""

from __future__ import annotations

import multiprocessing

import pytest
from cpu_configs import cpu_grpo_config
from test_fast_samplers import OLD_TRANSFORMERS  # continuous batching's transformers floor

from trl_envs import EnvGRPOTrainer, make_env_dataset
from trl_envs.samplers.continuous import NEEDS_TRANSFORMERS, ContinuousBatchingSampler
from trl_envs.samplers.static_cache import StaticCacheSampler
from trl_envs.trainers.async_rollouts import SamplerProcess
from trl_envs.trainers.env_setup import check_continuous_batching_version

pytestmark = pytest.mark.timeout(400)


def guess_number(renderer):
    return make_env_dataset("guess_number", renderer, group_size=4, batch_size=2, num_batches=8)


def logged(trainer, name: str) -> list[float]:
    return [h[name] for h in trainer.state.log_history if name in h]


@pytest.mark.parametrize(
    "overrides, sampler_class",
    [
        (dict(sampler_backend="static_cache"), StaticCacheSampler),
        pytest.param(dict(sampler_backend="continuous_batching"), ContinuousBatchingSampler, marks=OLD_TRANSFORMERS),
        pytest.param(
            dict(use_transformers_continuous_batching=True), ContinuousBatchingSampler, marks=OLD_TRANSFORMERS
        ),
    ],
)
def test_sync_training_uses_the_chosen_backend(
    overrides, sampler_class, tmp_path, tiny_model_path, tokenizer, renderer
):
    args = cpu_grpo_config(tmp_path, max_steps=2, max_completion_length=6, max_turns=3, disable_tqdm=True, **overrides)
    trainer = EnvGRPOTrainer(tiny_model_path, args, guess_number(renderer), processing_class=tokenizer)
    trainer.train()
    sampler = trainer.policy_sampler
    assert type(sampler) is sampler_class
    assert len(logged(trainer, "loss")) == 2
    rollout = trainer.last_rollout
    turns = sum(len(t.transitions) for g in rollout.groups for t in g.trajectories)
    if sampler_class is ContinuousBatchingSampler:
        assert rollout.sampler_batch_sizes == [1] * turns  # streamed: one request at a time, as each episode asks
        assert sampler.num_sessions == 2  # one per rollout; the model trains in between with its own attention
    else:
        assert sum(rollout.sampler_batch_sizes) == turns
        assert all(size & (size - 1) == 0 for size in sampler.batch_sizes)  # bucketed to powers of two


@OLD_TRANSFORMERS
def test_async_sampler_process_uses_the_chosen_backend(tmp_path, tiny_model_path, tokenizer, renderer, monkeypatch):
    made: list[SamplerProcess] = []
    original = SamplerProcess.__init__

    def recording(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(SamplerProcess, "__init__", recording)
    args = cpu_grpo_config(
        tmp_path,
        max_steps=3,
        max_completion_length=6,
        max_turns=3,
        disable_tqdm=True,
        max_staleness=1,
        sampler_backend="continuous_batching",
    )
    trainer = EnvGRPOTrainer(tiny_model_path, args, guess_number(renderer), processing_class=tokenizer)
    trainer.train()
    assert [p.sampler_class for p in made] == ["ContinuousBatchingSampler"]
    weights = logged(trainer, "async/importance_weight_mean")
    assert len(weights) == 3 and weights[0] == pytest.approx(1.0, abs=1e-4)
    assert not multiprocessing.active_children()  # the child and its continuous-batching loop ended with the run


def test_continuous_batching_on_too_old_a_transformers_is_one_line(tmp_path):
    flag = cpu_grpo_config(tmp_path, use_transformers_continuous_batching=True)
    with pytest.raises(ValueError, match=r"^EnvGRPOTrainer: use_transformers_continuous_batching=True needs "):
        check_continuous_batching_version(flag, "EnvGRPOTrainer", version="5.5.4")
    backend = cpu_grpo_config(tmp_path, sampler_backend="continuous_batching")
    with pytest.raises(ValueError, match=r"found transformers 5\.17\.0\. Use sampler_backend='static_cache' or"):
        check_continuous_batching_version(backend, "EnvGRPOTrainer", version="5.17.0")
    check_continuous_batching_version(backend, "EnvGRPOTrainer", version=NEEDS_TRANSFORMERS)
    check_continuous_batching_version(cpu_grpo_config(tmp_path), "EnvGRPOTrainer", version="5.4.0")  # not asked for
