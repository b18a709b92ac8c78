"""Lock-step sampling and the vLLM batching/padding logic in one process (no process group, no GPU).

Their multi-process counterparts (real 2-process gloo group, TRL's own server-mode ``VLLMGeneration.generate`` with a
fake vLLM client) are in tests/test_distributed.py (``test_lockstep_*``, ``test_vllm_server_*``); the real vLLM runs
are in scripts/gpu_check.sh.
"""

from __future__ import annotations

import math
import types

import pytest

pytestmark = pytest.mark.timeout(60)


# -- single process -------------------------------------------------------------------------------------------------


def test_lockstep_is_a_pass_through_without_a_process_group():
    from trl_envs.core.types import TokensWithLogprobs
    from trl_envs.samplers.base import SampleRequest
    from trl_envs.samplers.lockstep import LockstepSampler

    class Echo:
        def __init__(self):
            self.calls = []

        def sample(self, requests):
            self.calls.append(len(requests))
            return [TokensWithLogprobs([1], [0.0], "length") for _ in requests]

    inner = Echo()
    lock = LockstepSampler(inner, [0], equal_batch_sizes=True)
    assert len(lock.sample([SampleRequest([1], [], 1)] * 2)) == 2
    lock.drain()
    assert inner.calls == [2] and lock.num_calls == 1 and lock.num_dummy_calls == 0
    with pytest.raises(ValueError, match="dummy_prompt"):
        LockstepSampler(inner, [])


class _FakeColocateGeneration:
    """TRL's colocate-mode ``VLLMGeneration`` surface: generate(prompts, images, num_generations) with the
    instance's max_completion_length / generation_kwargs; returns (prompt_ids, completion_ids, logprobs, ids)."""

    mode = "colocate"

    def __init__(self, logprob_ids=True):
        self.max_completion_length, self.generation_kwargs = 32, {"top_k": 5}
        self.seen: list[dict] = []
        self.logprob_ids = logprob_ids

    def generate(self, prompts, images, num_generations):
        assert images is None and num_generations == 1
        self.seen.append({"max": self.max_completion_length, "kwargs": dict(self.generation_kwargs)})
        stops = set(self.generation_kwargs.get("stop_token_ids", []))
        completions = []
        for _ in prompts:
            tokens = []
            for t in range(100, 100 + self.max_completion_length):
                tokens.append(t)
                if t in stops:
                    break
            completions.append(tokens)
        logprobs = [[[None] if t == 101 else [-0.25, -float(t)] for t in c] for c in completions]
        ids = [[[t] if t == 101 else [-1, t] for t in c] for c in completions] if self.logprob_ids else None
        return prompts, completions, logprobs, ids


def _vllm_sampler(gen):
    from trl_envs.samplers.vllm import VLLMSampler

    tokenizer = types.SimpleNamespace(eos_token_id=7, decode=lambda ids, **kw: "")
    return VLLMSampler(gen, tokenizer)


def test_vllm_colocate_cuts_each_request_at_its_own_stop_and_budget():
    from trl_envs.samplers.base import SampleRequest

    gen = _FakeColocateGeneration()
    out = _vllm_sampler(gen).sample(
        [SampleRequest([1], [103], 6), SampleRequest([2], [], 2), SampleRequest([3], [], 6)]
    )
    assert gen.seen == [{"max": 6, "kwargs": {"top_k": 5, "stop_token_ids": [7, 103]}}]  # one call, union of stops
    assert out[0].tokens == [100, 101, 102, 103] and out[0].finish_reason == "stop"
    assert out[1].tokens == [100, 101] and out[1].finish_reason == "length"
    # request 3 did not ask to stop on 103; vLLM stopped it there for request 1's sake: reported as cut short
    assert out[2].tokens == [100, 101, 102, 103] and out[2].finish_reason == "length"
    assert gen.max_completion_length == 32 and gen.generation_kwargs == {"top_k": 5}  # restored


def test_vllm_logprobs_flat_per_token_with_nan_for_missing():
    from trl_envs.samplers.base import SampleRequest

    for with_ids in (True, False):
        out = _vllm_sampler(_FakeColocateGeneration(logprob_ids=with_ids)).sample([SampleRequest([1], [], 3)])
        lp = out[0].logprobs
        assert len(lp) == len(out[0].tokens) == 3
        assert math.isnan(lp[1])  # vLLM's NaN arrives as None
        assert lp[0] == (-100.0 if with_ids else -0.25) and lp[2] == (-102.0 if with_ids else -0.25)


def test_vllm_sampler_refuses_a_completion_count_mismatch():
    from trl_envs.samplers.base import SampleRequest

    gen = _FakeColocateGeneration()
    gen.generate = lambda prompts, images, num_generations: (prompts, [[1]], [[[0.0]]], None)
    with pytest.raises(RuntimeError, match="equally many prompts"):
        _vllm_sampler(gen).sample([SampleRequest([1], [], 2), SampleRequest([2], [], 2)])


def test_sampled_logprob_and_settings_agreement_single_process():
    from trl_envs.samplers.vllm import agree_sampling_settings, sampled_logprob

    assert sampled_logprob([-0.1, -2.0], [5, 9], 9) == -2.0
    assert sampled_logprob([-0.1], None, 9) == -0.1
    assert math.isnan(sampled_logprob([None], [9], 9)) and math.isnan(sampled_logprob([], None, 9))
    assert agree_sampling_settings(4, [1], ["x"]) == (4, [1], ["x"])


def test_launched_processes_that_did_not_join_one_job_are_refused():
    from trl_envs.trainers.env_setup import check_single_process_launch

    check_single_process_launch(1, {}, "EnvGRPOTrainer")
    check_single_process_launch(2, {"WORLD_SIZE": "2"}, "EnvGRPOTrainer")
    with pytest.raises(RuntimeError, match="EnvGRPOTrainer: 2 processes.*use_cpu=True"):
        check_single_process_launch(1, {"WORLD_SIZE": "2"}, "EnvGRPOTrainer")


def test_vllm_settings_are_agreed_in_server_mode_and_tensor_parallel_colocate():
    gen = _FakeColocateGeneration()
    assert not _vllm_sampler(gen).shares_sampling_settings  # colocate, one GPU per rank: each rank its own
    gen.tensor_parallel_size = 2
    assert _vllm_sampler(gen).shares_sampling_settings  # the TP group runs one generation for all its prompts
    gen.tensor_parallel_size, gen.mode = 1, "server"
    assert _vllm_sampler(gen).shares_sampling_settings  # rank 0 sends everyone's prompts with its settings
