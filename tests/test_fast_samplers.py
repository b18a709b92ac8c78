"""The fast in-process samplers (``sampler_backend``: static_cache, continuous_batching) give the rows ``generate``
gives: token-exact under greedy decoding, logprobs equal to a teacher-forced forward pass when sampling, with LoRA,
after an optimizer step, and through the rollout engine (continuous batching streams each episode's request as soon as
it asks). Their speed is a GPU matter (bench/gpu_rollouts.py); here their logic runs on the tiny model on the CPU."""

import asyncio
import copy
import sys
import threading
import types
import warnings
from concurrent.futures import Future

import pytest
import torch
import transformers
from packaging.version import Version
from transformers import AutoModelForCausalLM, CompileConfig

from trl_envs import (
    Env,
    EnvGroupBuilder,
    HFSampler,
    RolloutBudget,
    SampleRequest,
    StepResult,
    TokensWithLogprobs,
    run_rollout_batch,
    trajectory_to_data,
)
from trl_envs.envs.guess_number import GuessNumberGroupBuilder
from trl_envs.samplers.choice import build_sampler
from trl_envs.samplers.continuous import NEEDS_TRANSFORMERS, ContinuousBatchingSampler
from trl_envs.samplers.static_cache import StaticCacheSampler
from trl_envs.trainers.env_setup import check_sampler_backend
from trl_envs.trainers.grpo_config import EnvGRPOConfig

OLD_TRANSFORMERS = pytest.mark.skipif(
    Version(transformers.__version__).release < Version(NEEDS_TRANSFORMERS).release,
    reason=f"continuous batching needs transformers>={NEEDS_TRANSFORMERS}; found {transformers.__version__} (the "
    "refusal is tested instead)",
)
FAST = ("static_cache", pytest.param("continuous_batching", marks=OLD_TRANSFORMERS))


@pytest.fixture(scope="module")
def model(tiny_model_path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()


@pytest.fixture(scope="module")
def requests(renderer, tokenizer):
    """Prompts of different lengths, budgets and stop conditions (a stop string included)."""
    stop = renderer.get_stop_sequences()
    prompts = [
        renderer.build_generation_prompt([{"role": "user", "content": f"What is {a} + {b}?"}])
        for a, b in [(3, 4), (12, 30), (7, 7), (100, 1), (5, 9)]
    ]
    text = tokenizer.encode("The quick brown fox jumps", add_special_tokens=False)
    return [
        SampleRequest(prompts[0], stop, 16),
        SampleRequest(prompts[1], stop, 2),
        SampleRequest(prompts[2], stop, 1),
        SampleRequest(prompts[3] + prompts[4], stop, 12),
        SampleRequest(text, [], 9),
        SampleRequest(text, ["e"], 9),
    ]


def teacher_forced(model, prompt, tokens, temperature=1.0):
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1)


def assert_logprobs_match_forward(model, requests, results, temperature):
    for r, out in zip(requests, results):
        assert 1 <= len(out.tokens) <= r.max_tokens
        expected = teacher_forced(model, r.prompt, out.tokens, temperature)
        assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4), (out, expected)


def eager_compile() -> CompileConfig:
    """Compile the decoding step on the CPU too (transformers compiles it by itself only on a GPU): dynamo traces and
    guards it as on a GPU, run with the eager backend (inductor takes minutes on this CPU)."""
    config = CompileConfig(backend="eager", mode="default", fullgraph=False)
    config._compile_all_devices = True  # test only: trl_envs itself leaves compiling to transformers' own choice
    return config


def make(backend, model, tokenizer, **settings):
    if backend == "static_cache":
        settings.setdefault("compile_config", eager_compile())
    return build_sampler(backend, model, tokenizer, **settings)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", FAST)
def test_greedy_rows_are_token_exact_with_generate(backend, model, tokenizer, requests):
    expected = HFSampler(model, tokenizer, temperature=0).sample(requests)
    got = make(backend, model, tokenizer, temperature=0).sample(requests)
    assert [(o.tokens, o.finish_reason) for o in got] == [(o.tokens, o.finish_reason) for o in expected]
    for g, e in zip(got, expected):
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(e.logprobs), atol=1e-4)
    assert any(o.finish_reason == "length" for o in got) and any(o.finish_reason == "stop" for o in got)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", FAST)
def test_sampled_logprobs_equal_a_forward_pass(backend, model, tokenizer, requests):
    torch.manual_seed(0)
    results = make(backend, model, tokenizer, temperature=0.7).sample(requests)
    assert_logprobs_match_forward(model, requests, results, 0.7)


@pytest.mark.timeout(300)
def test_static_cache_buckets_shapes_and_padding_rows_change_nothing(model, tokenizer, requests):
    sampler = StaticCacheSampler(model, tokenizer, temperature=0, cache_multiple=64)
    plain = HFSampler(model, tokenizer, temperature=0)
    for n in (1, 3, 6):
        got = sampler.sample(requests[:n])
        assert [o.tokens for o in got] == [o.tokens for o in plain.sample(requests[:n])]
    assert sampler.batch_sizes == {1, 4, 8}
    assert sampler.num_padding_rows == 1 + 2
    assert sampler.cache_lengths and all(n % 64 == 0 for n in sampler.cache_lengths)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", FAST)
def test_an_optimizer_step_is_seen_by_the_next_call(backend, tiny_model_path, tokenizer, requests):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    sampler = make(backend, model, tokenizer, temperature=0)
    before = sampler.sample(requests)  # compiles the decoding step (static_cache) / sets up a session and ends it
    optimizer = torch.optim.SGD(model.parameters(), lr=5.0)
    model.train()
    ids = torch.tensor([requests[0].prompt])
    model(ids, labels=ids).loss.backward()
    optimizer.step()  # in place
    model.eval()
    after = sampler.sample(requests)
    assert [o.logprobs for o in after] != [o.logprobs for o in before]
    assert_logprobs_match_forward(model, requests, after, 1.0)
    assert [o.tokens for o in after] == [o.tokens for o in HFSampler(model, tokenizer, temperature=0).sample(requests)]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", FAST)
def test_lora_policy(backend, tiny_model_path, tokenizer, requests):
    peft = pytest.importorskip("peft")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    policy = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():  # a non-zero adapter, so that it matters
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    policy.eval()
    expected = HFSampler(policy, tokenizer, temperature=0).sample(requests)
    got = make(backend, policy, tokenizer, temperature=0).sample(requests)
    assert [o.tokens for o in got] == [o.tokens for o in expected]
    without = HFSampler(base, tokenizer, temperature=0)
    with policy.disable_adapter():
        plain = without.sample(requests)
    assert [o.logprobs for o in plain] != [o.logprobs for o in got]  # the adapter was used
    assert_logprobs_match_forward(policy, requests, got, 1.0)


@OLD_TRANSFORMERS
@pytest.mark.timeout(300)
def test_continuous_batching_restores_the_model(tiny_model_path, tokenizer, requests):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model.train()
    attention = model.config._attn_implementation
    entered = []

    def context():
        entered.append(1)
        return contextlib_nullcontext(model)

    sampler = ContinuousBatchingSampler(model, tokenizer, temperature=0, model_context=context)
    sampler.sample(requests[:2])
    assert entered == [1] and sampler.num_sessions == 1
    assert model.training and model.config._attn_implementation == attention
    with sampler.session():  # one session for several calls
        sampler.sample(requests[:2])
        sampler.sample(requests[2:4])
    assert sampler.num_sessions == 2
    with pytest.raises(RuntimeError, match="open session"):
        sampler.submit(requests[0])


def contextlib_nullcontext(value):
    import contextlib

    return contextlib.nullcontext(value)


def test_continuous_batching_on_too_old_a_transformers_is_one_line(model, tokenizer, monkeypatch):
    # the module the sampler imports now (an import of the test session may have put another object there)
    monkeypatch.setattr(sys.modules["transformers"], "__version__", "5.5.4")
    with pytest.raises(
        ValueError, match=r"^ContinuousBatchingSampler needs transformers>=5\.18 .* found transformers 5\.5\.4"
    ):
        ContinuousBatchingSampler(model, tokenizer)


@OLD_TRANSFORMERS
def test_settings_the_backends_cannot_honour_are_refused(model, tokenizer):
    with pytest.raises(ValueError, match="top_p"):
        ContinuousBatchingSampler(model, tokenizer, top_p=0.9)
    with pytest.raises(ValueError, match="repetition_penalty"):
        build_sampler("continuous_batching", model, tokenizer, repetition_penalty=1.1)
    with pytest.raises(ValueError, match="cache_implementation"):
        build_sampler("continuous_batching", model, tokenizer, cache_implementation="static")
    with pytest.raises(ValueError, match="cache_implementation"):
        StaticCacheSampler(model, tokenizer, cache_implementation="dynamic")
    with pytest.raises(ValueError, match="sampler_backend"):
        build_sampler("vllm_fast", model, tokenizer)


def test_config_field_and_trl_continuous_batching_flag(cpu_grpo_config):
    assert cpu_grpo_config().resolved_sampler_backend() == "generate"
    assert cpu_grpo_config(sampler_backend="static_cache").resolved_sampler_backend() == "static_cache"
    chosen = cpu_grpo_config(use_transformers_continuous_batching=True)
    assert chosen.resolved_sampler_backend() == "continuous_batching"
    chosen = cpu_grpo_config(
        use_transformers_continuous_batching=True, transformers_continuous_batching_config={"num_blocks": 32}
    )
    assert chosen.continuous_batching_options() == {"num_blocks": 32}
    with pytest.raises(ValueError, match="EnvGRPOConfig.sampler_backend must be one of"):
        cpu_grpo_config(sampler_backend="fast")
    with pytest.raises(ValueError, match="use_transformers_continuous_batching=True .* sampler_backend='static_cache'"):
        cpu_grpo_config(sampler_backend="static_cache", use_transformers_continuous_batching=True)
    with pytest.raises(ValueError, match="use_vllm"):
        EnvGRPOConfig("unused", sampler_backend="continuous_batching", use_vllm=True, use_cpu=True, bf16=False)


@pytest.mark.parametrize("backend", FAST)
@pytest.mark.parametrize("zero_stage, fsdp, named", [(3, False, "ZeRO-3"), (None, True, "FSDP")])
def test_sharded_policies_are_refused_naming_the_field(backend, zero_stage, fsdp, named):
    plugin = None if zero_stage is None else types.SimpleNamespace(zero_stage=zero_stage)
    args = types.SimpleNamespace(resolved_sampler_backend=lambda: backend, use_vllm=False)
    trainer = types.SimpleNamespace(
        args=args,
        custom_sampler=None,
        is_fsdp_enabled=fsdp,
        accelerator=types.SimpleNamespace(state=types.SimpleNamespace(deepspeed_plugin=plugin)),
    )
    with pytest.raises(ValueError, match=f"sampler_backend='{backend}' is not supported with .*{named}"):
        check_sampler_backend(trainer, "EnvGRPOTrainer")
    trainer.is_fsdp_enabled, trainer.accelerator.state.deepspeed_plugin = False, types.SimpleNamespace(zero_stage=2)
    trainer.accelerator.mixed_precision = "no"
    trainer.model = torch.nn.Linear(2, 2)
    check_sampler_backend(trainer, "EnvGRPOTrainer")  # ZeRO-2 and DDP are fine


def test_continuous_batching_warns_when_it_cannot_follow_the_trainers_autocast():
    trainer = types.SimpleNamespace(
        args=types.SimpleNamespace(resolved_sampler_backend=lambda: "continuous_batching", use_vllm=False),
        custom_sampler=None,
        is_fsdp_enabled=False,
        accelerator=types.SimpleNamespace(state=types.SimpleNamespace(deepspeed_plugin=None), mixed_precision="bf16"),
        model=torch.nn.Linear(2, 2),
    )
    with pytest.warns(UserWarning, match="--dtype bfloat16"):
        check_sampler_backend(trainer, "EnvGRPOTrainer")
    trainer.model = trainer.model.to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_sampler_backend(trainer, "EnvGRPOTrainer")


# -- the rollout engine streams requests to continuous batching ---------------------------------------------------


@pytest.mark.timeout(300)
@OLD_TRANSFORMERS
def test_multi_turn_rollout_through_continuous_batching(model, tokenizer, renderer):
    """guess_number rolled out by the engine: each turn's request streamed on its own; every training row's sampled
    tokens carry the logprobs of a teacher-forced pass over the whole row (env tokens 0)."""
    builders = [GuessNumberGroupBuilder(renderer, target=t, group_size=2, max_guesses=3) for t in (4, 13)]
    sampler = ContinuousBatchingSampler(model, tokenizer, temperature=0.8)
    torch.manual_seed(7)
    with sampler.session():
        result = run_rollout_batch(builders, sampler, RolloutBudget(max_turns=3, max_tokens_per_turn=4))
    trajectories = [traj for g in result.groups for traj in g.trajectories]
    assert result.num_sampler_calls == sum(len(t.transitions) for t in trajectories)
    assert set(result.sampler_batch_sizes) == {1}
    assert any(len(t.transitions) > 1 for t in trajectories)
    for traj in trajectories:
        row = trajectory_to_data(traj)
        seq = row.prompt_ids + row.completion_ids
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([seq])).logits[0].float() / 0.8, dim=-1)
        for k, (tok, m, got) in enumerate(zip(row.completion_ids, row.mask, row.logprobs)):
            want = lp[len(row.prompt_ids) + k - 1, tok].item() if m else 0.0
            assert got == pytest.approx(want, abs=1e-4), (k, tok)


class StreamingRecorder:
    """A streaming sampler stand-in (``submit``) that answers at once and records the order of requests."""

    def __init__(self):
        self.submitted: list[list[int]] = []
        self.second_turn_asked = threading.Event()

    def submit(self, request):
        self.submitted.append(list(request.prompt))
        if request.prompt[0] == 1 and len(request.prompt) > 2:  # the fast episode's second turn
            self.second_turn_asked.set()
        future = Future()
        future.set_result(TokensWithLogprobs([7, 2], [-0.5, -0.5], "stop"))
        return future

    def sample(self, requests):
        raise AssertionError("a streaming sampler is not called by the wave")


class SlowUntil(Env):
    """First step: the fast episode (``first_token`` 1) returns at once; the slow one (2) keeps working (timers, so
    the loop is not quiet) until the fast episode's next request has gone to the sampler."""

    def __init__(self, first_token, recorder):
        self.first_token, self.recorder, self.turn = first_token, recorder, 0

    async def initial_observation(self):
        return [self.first_token, 100], [2]

    async def step(self, action, *, extra=None):
        self.turn += 1
        if self.first_token == 2 and self.turn == 1:
            while not self.recorder.second_turn_asked.is_set():
                await asyncio.sleep(0.005)
        done = self.turn >= 2
        return StepResult(1.0, done, [self.first_token, 100, *action, 50], [2])


class TwoSpeeds(EnvGroupBuilder):
    def __init__(self, recorder):
        self.recorder = recorder

    async def make_envs(self):
        return [SlowUntil(1, self.recorder), SlowUntil(2, self.recorder)]


@pytest.mark.timeout(120)
def test_an_episodes_next_turn_is_sent_without_waiting_for_the_slowest():
    recorder = StreamingRecorder()
    # With turn-by-turn batching the fast episode's second request would wait for the slow episode's step, which
    # waits for that request: only the max_wait_s valve (10 minutes here) would end it.
    result = run_rollout_batch([TwoSpeeds(recorder)], recorder, RolloutBudget(max_turns=2), max_wait_s=600)
    assert recorder.second_turn_asked.is_set()
    assert result.num_sampler_calls == 4 and result.sampler_batch_sizes == [1, 1, 1, 1]
    slow_second = next(i for i, p in enumerate(recorder.submitted) if p[0] == 2 and len(p) > 2)
    fast_second = next(i for i, p in enumerate(recorder.submitted) if p[0] == 1 and len(p) > 2)
    assert fast_second < slow_second
    assert all(len(traj.transitions) == 2 for g in result.groups for traj in g.trajectories)


def test_generate_stays_the_default_and_unchanged(model, tokenizer, requests):
    sampler = build_sampler("generate", model, tokenizer, temperature=0)
    assert type(sampler) is HFSampler
    assert [o.tokens for o in sampler.sample(requests)] == [
        o.tokens for o in HFSampler(copy.deepcopy(model), tokenizer, temperature=0).sample(requests)
    ]


@pytest.mark.timeout(300)
def test_static_cache_samples_the_same_tokens_as_generate_under_one_seed(model, tokenizer, requests):
    """With a batch already at a bucketed size (no padding rows draw random numbers) the static cache changes only
    where keys and values live: the same seed samples the same rows."""
    batch = requests[:4]
    torch.manual_seed(123)
    expected = HFSampler(model, tokenizer, temperature=1.0).sample(batch)
    torch.manual_seed(123)
    got = StaticCacheSampler(model, tokenizer, temperature=1.0).sample(batch)
    assert [(o.tokens, o.finish_reason) for o in got] == [(o.tokens, o.finish_reason) for o in expected]
    for g, e in zip(got, expected):
        assert torch.allclose(torch.tensor(g.logprobs), torch.tensor(e.logprobs), atol=1e-4)
