"""What real runs throw at the rollout engine (issue 16, rollout side): envs that hang or block the event loop,
abandoned worker threads, transient builder failures, bad values from envs and samplers, failing cleanups, and
episodes that outgrow the model's context. One test per case; scripted samplers, sub-second sleeps."""

import asyncio
import logging
import threading
import time
import traceback

import pytest
import torch

from trl_envs import (
    ContextBudgetError,
    Env,
    EnvContractError,
    EnvGroupBuilder,
    FailFast,
    MessageEnv,
    MessageStepResult,
    MessageTokenEnv,
    RetryOnFailure,
    RolloutBudget,
    RolloutTimeoutError,
    StepResult,
    TokensWithLogprobs,
    run_rollout_batch,
)

EOT = 2


class Sampler:
    """Answers every request with ``respond(prompt, max_tokens)`` (default ``[7, EOT]``); records the requests."""

    def __init__(self, respond=None):
        self.respond = respond or (lambda prompt, max_tokens: TokensWithLogprobs([7, EOT][:max_tokens], None))
        self.requests = []

    def sample(self, requests):
        self.requests.extend(requests)
        return [self.respond(r.prompt, r.max_tokens) for r in requests]


class Turns(Env):
    """``turns`` turns of reward 1; each observation extends the last by the action and ``reply`` tokens."""

    def __init__(self, turns=1, prompt_len=2, reply=2):
        self.turns, self.reply, self.turn = turns, reply, 0
        self.ob = [100 + k % 50 for k in range(prompt_len)]

    async def initial_observation(self):
        return list(self.ob), [EOT]

    async def step(self, action, *, extra=None):
        self.turn += 1
        done = self.turn >= self.turns
        self.ob = self.ob + list(action) + ([] if done else [50] * self.reply)
        return StepResult(1.0, done, list(self.ob), [EOT])


class Group(EnvGroupBuilder):
    """``size`` envs from ``make(call, index)``; ``rewards(trajectories)`` scores the group; counts cleanups."""

    def __init__(self, make=lambda call, i: Turns(), size=2, rewards=None):
        self.make, self.size, self.rewards = make, size, rewards
        self.make_calls = self.reward_calls = self.cleaned = 0

    async def make_envs(self):
        self.make_calls += 1
        return [self.make(self.make_calls - 1, i) for i in range(self.size)]

    async def compute_group_rewards(self, trajectory_group, env_group):
        self.reward_calls += 1
        if self.rewards is None:
            return [(0.0, {}) for _ in trajectory_group]
        return self.rewards(trajectory_group)

    async def cleanup(self):
        self.cleaned += 1


class Hangs(Turns):
    """Step 0 of env ``index`` 0 of the first ``make_envs`` call awaits forever (the others are healthy)."""

    async def step(self, action, *, extra=None):
        if self.hang:
            await asyncio.Event().wait()
        return await super().step(action, extra=extra)


def hanging_group():
    def make(call, i):
        env = Hangs()
        env.hang = (call, i) == (0, 0)
        return env

    return Group(make)


# -- envs that hang or block ----------------------------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_hung_step_under_fail_fast_with_timeout_names_env_and_time():
    group = hanging_group()
    start = time.perf_counter()
    with pytest.raises(
        RolloutTimeoutError,
        match=r"Group: rollout 0 \(Hangs\) timed out.*rollout_timeout=0.3s.*"
        r"in Hangs\.step \(turn 0\), \d+\.\ds after it started",
    ):
        run_rollout_batch([group], Sampler(), strategy=FailFast(per_rollout_timeout=0.3))
    assert time.perf_counter() - start < 5
    assert group.cleaned == 1


@pytest.mark.timeout(20)
def test_hung_step_under_retry_with_timeout_is_retried():
    group = hanging_group()
    result = run_rollout_batch([group], Sampler(), strategy=RetryOnFailure(max_retries=1, per_rollout_timeout=0.3))
    assert result.groups[0] is not None and result.error_counts == {"TimeoutError": 1}
    assert group.make_calls == 2


def test_rollout_timeout_config_reaches_fail_fast():
    from trl_envs.trainers.rollout_args import RolloutArguments

    with pytest.warns(UserWarning, match="stops training with an error"):
        assert RolloutArguments(rollout_timeout=3.0).error_strategy() == FailFast(per_rollout_timeout=3.0)
    assert RolloutArguments(
        rollout_timeout=3.0, rollout_error_strategy="retry", rollout_max_retries=1
    ).error_strategy() == RetryOnFailure(1, 3.0)


@pytest.fixture
def watchdog_log(caplog):
    caplog.set_level(logging.WARNING, logger="trl_envs.rollout.watchdog")
    return caplog


@pytest.mark.timeout(20)
def test_step_stuck_blocking_the_loop_is_named_while_it_blocks_without_timeout(watchdog_log):
    seen_while_blocked = []

    class StuckInSyncCall(Turns):
        async def step(self, action, *, extra=None):
            time.sleep(0.8)  # a hang inside synchronous code: no timeout could cut it
            seen_while_blocked.append(watchdog_log.text)
            return await super().step(action, extra=extra)

    run_rollout_batch(
        [Group(lambda c, i: StuckInSyncCall(), size=1)], Sampler(), RolloutBudget(report_blocking_after_s=0.2)
    )
    assert "StuckInSyncCall.step has blocked the event loop for" in seen_while_blocked[0]


@pytest.mark.timeout(20)
def test_blocking_step_is_reported_once_by_name(watchdog_log):
    class BlocksTheLoop(Turns):
        async def step(self, action, *, extra=None):
            time.sleep(0.5)
            return await super().step(action, extra=extra)

    result = run_rollout_batch(
        [Group(lambda c, i: BlocksTheLoop(), size=3)], Sampler(), RolloutBudget(report_blocking_after_s=0.2)
    )
    assert result.groups[0] is not None
    reports = [r.getMessage() for r in watchdog_log.records if "BlocksTheLoop" in r.getMessage()]
    assert len(reports) == 1, reports  # 3 blocking steps, one report
    assert "BlocksTheLoop.step has blocked the event loop" in reports[0] and "asyncio.to_thread" in reports[0]


@pytest.mark.timeout(20)
def test_blocking_message_env_is_named_by_its_own_class(watchdog_log, renderer):
    from trl_envs.core.message_env import MessageTokenEnv
    from trl_envs.envs.guess_number import GuessNumberEnv

    class SyncGrader(GuessNumberEnv):
        async def step(self, response):
            time.sleep(0.8)
            return await super().step(response)

    eot = renderer.tokenizer.convert_tokens_to_ids("<|im_end|>")
    sampler = Sampler(lambda prompt, max_tokens: TokensWithLogprobs([eot], None))
    run_rollout_batch(
        [Group(lambda c, i: MessageTokenEnv(SyncGrader(target=3), renderer), size=1)],
        sampler,
        RolloutBudget(max_turns=1, report_blocking_after_s=0.2),
    )
    assert any(r.getMessage().startswith("SyncGrader.step has blocked the event loop") for r in watchdog_log.records)


@pytest.mark.timeout(20)
def test_a_slow_sampler_on_the_loop_thread_is_not_reported_as_blocking(watchdog_log):
    def slow(prompt, max_tokens):
        time.sleep(0.6)  # a long generate call: the loop's own work, not an env blocking it
        return TokensWithLogprobs([7, EOT][:max_tokens], None)

    result = run_rollout_batch(
        [Group(lambda c, i: Turns(), size=1)], Sampler(slow), RolloutBudget(report_blocking_after_s=0.1)
    )
    assert result.groups[0] is not None
    assert not [r.getMessage() for r in watchdog_log.records if "blocked the event loop" in r.getMessage()]


def test_the_watchdog_thread_is_started_once_not_per_batch():
    for _ in range(3):
        run_rollout_batch([Group(lambda c, i: Turns(), size=2)], Sampler(), RolloutBudget(report_blocking_after_s=0.2))
    assert [t.name for t in threading.enumerate()].count("trl_envs-watchdog") == 1


@pytest.mark.timeout(20)
def test_blocking_step_past_the_timeout_counts_as_timed_out(watchdog_log):
    class BlocksPastTimeout(Turns):
        async def step(self, action, *, extra=None):
            time.sleep(0.4)  # nothing can interrupt it, but the rollout still ran past its timeout
            return await super().step(action, extra=extra)

    result = run_rollout_batch(
        [Group(lambda c, i: BlocksPastTimeout(), size=1)],
        Sampler(),
        RolloutBudget(report_blocking_after_s=0.1),
        RetryOnFailure(max_retries=0, per_rollout_timeout=0.2),
    )
    assert result.groups == [None] and result.error_counts == {"TimeoutError": 1, "GroupSkipped": 1}


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "strategy", [RetryOnFailure(max_retries=0, per_rollout_timeout=0.3), FailFast(per_rollout_timeout=0.3)]
)
def test_abandoned_to_thread_call_does_not_hold_up_the_batch(strategy):
    class SlowInThread(Turns):
        async def step(self, action, *, extra=None):
            await asyncio.to_thread(time.sleep, 4)  # the pattern the docs recommend, for a call that hangs
            return await super().step(action, extra=extra)

    start = time.perf_counter()
    if isinstance(strategy, FailFast):
        with pytest.raises(RolloutTimeoutError, match="SlowInThread"):
            run_rollout_batch([Group(lambda c, i: SlowInThread(), size=2)], Sampler(), strategy=strategy)
    else:
        result = run_rollout_batch([Group(lambda c, i: SlowInThread(), size=2)], Sampler(), strategy=strategy)
        assert result.groups == [None]
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, f"the batch waited {elapsed:.1f}s for abandoned threads"


# -- transient builder failures under retry -------------------------------------------------------------------------


class FlakyGroup(Group):
    """``make_envs`` / ``compute_group_rewards`` fail their first ``make_failures`` / ``reward_failures`` calls."""

    def __init__(self, make_failures=0, reward_failures=0):
        super().__init__()
        self.make_failures, self.reward_failures = make_failures, reward_failures

    async def make_envs(self):
        if self.make_calls < self.make_failures:
            self.make_calls += 1
            raise ConnectionError("sandbox service unavailable")
        return await super().make_envs()

    async def compute_group_rewards(self, trajectory_group, env_group):
        if self.reward_calls < self.reward_failures:
            self.reward_calls += 1
            raise ConnectionError("judge unavailable")
        return await super().compute_group_rewards(trajectory_group, env_group)


def test_transient_make_envs_failure_is_retried():
    group = FlakyGroup(make_failures=1)
    result = run_rollout_batch([group], Sampler(), strategy=RetryOnFailure(max_retries=1))
    assert result.groups[0] is not None and result.error_counts == {"ConnectionError": 1}
    assert group.make_calls == 2


def test_transient_compute_group_rewards_failure_is_retried_without_replaying():
    group = FlakyGroup(reward_failures=2)
    result = run_rollout_batch([group], Sampler(), strategy=RetryOnFailure(max_retries=2))
    assert result.groups[0] is not None and result.error_counts == {"ConnectionError": 2}
    assert group.reward_calls == 3 and group.make_calls == 1


def test_builder_retries_share_the_group_budget_and_fail_fast_still_raises():
    group = FlakyGroup(make_failures=1, reward_failures=1)
    result = run_rollout_batch([group], Sampler(), strategy=RetryOnFailure(max_retries=1))
    assert result.groups == [None] and result.error_counts == {"ConnectionError": 2, "GroupSkipped": 1}
    assert group.cleaned == 1
    with pytest.raises(ConnectionError, match="sandbox service unavailable"):
        run_rollout_batch([FlakyGroup(make_failures=1)], Sampler(), strategy=FailFast())


# -- bad values from envs -------------------------------------------------------------------------------------------


class Scored(Group):
    pass


@pytest.mark.parametrize(
    "rewards, pattern",
    [
        (lambda ts: [(float("nan"), {}), (1.0, {})], r"returned reward=nan for trajectory 0; it must be a finite"),
        (lambda ts: [(0.0, {}), (float("inf"), {})], r"returned reward=inf for trajectory 1; it must be a finite"),
        (lambda ts: "abc", r"must return one \(reward, metrics\) per trajectory \(2\), got 'abc'"),
        (lambda ts: [1.0, 0.0], r"must return \(reward, metrics\) pairs; item 0 is 1.0"),
        (lambda ts: [("1", {}), (0.0, {})], r"returned reward='1' for trajectory 0"),
        (lambda ts: [(1.0, {"judge": "good"}), (0.0, {})], r"\(trajectory 0\) metric 'judge'='good' is not a number"),
    ],
)
@pytest.mark.parametrize("strategy", [FailFast(), RetryOnFailure(3)])
def test_bad_group_rewards_name_the_builder_method_and_value(rewards, pattern, strategy):
    group = Scored(rewards=rewards)
    with pytest.raises(EnvContractError, match=r"Scored\.compute_group_rewards.*" + pattern):
        run_rollout_batch([group], Sampler(), strategy=strategy)
    assert group.reward_calls == 1 and group.cleaned == 1  # a bug is never retried


def test_env_error_with_failing_cleanup_raises_the_original_with_the_cleanup_failure_attached():
    class Crashes(Turns):
        async def step(self, action, *, extra=None):
            raise RuntimeError("env crashed")

    class LeakyGroup(Group):
        async def cleanup(self):
            raise OSError("sandbox already gone")

    with pytest.raises(RuntimeError, match="env crashed") as info:
        run_rollout_batch([LeakyGroup(lambda c, i: Crashes())], Sampler())
    shown = "".join(traceback.format_exception(info.value))
    assert "LeakyGroup.cleanup() also failed: OSError: sandbox already gone" in shown


def test_error_traceback_has_no_event_loop_noise():
    class Crashes(Turns):
        async def step(self, action, *, extra=None):
            raise ValueError("bad move")

    with pytest.raises(ValueError) as info:
        run_rollout_batch([Group(lambda c, i: Crashes())], Sampler())
    shown = "".join(traceback.format_exception(info.value))
    assert "no running event loop" not in shown and "During handling" not in shown
    assert shown.startswith("Traceback")


# -- context length and sampler output ------------------------------------------------------------------------------


def test_over_long_observation_is_never_sampled():
    sampler = Sampler()
    with pytest.raises(
        ContextBudgetError,
        match=r"Turns: the observation of turn 0 is 50 tokens.*context budget of "
        r"20 tokens",
    ):
        run_rollout_batch([Group(lambda c, i: Turns(prompt_len=50))], sampler, RolloutBudget(max_context_tokens=20))
    assert sampler.requests == []


@pytest.mark.parametrize("overflow", ["end", "error"])
def test_growing_multi_turn_episode_stops_at_the_context_budget(overflow):
    sampler = Sampler(lambda prompt, max_tokens: TokensWithLogprobs([7] * max_tokens, None, "length"))
    budget = RolloutBudget(max_turns=None, max_tokens_per_turn=4, max_context_tokens=14, context_overflow=overflow)
    builders = [Group(lambda c, i: Turns(turns=100, prompt_len=2, reply=2))]
    if overflow == "error":
        with pytest.raises(ContextBudgetError, match=r"Turns: the observation of turn 2 is 14 tokens"):
            run_rollout_batch(builders, sampler, budget)
        return
    trajectory = run_rollout_batch(builders, sampler, budget).groups[0].trajectories[0]
    assert trajectory.stop_reason == "max_tokens"
    assert [len(t.ob) for t in trajectory.transitions] == [2, 8]  # turn 2's 14 tokens left no room to sample
    assert all(len(r.prompt) + r.max_tokens <= 14 for r in sampler.requests)


def test_trainer_budget_defaults_to_the_model_limits():
    from transformers import Qwen2Config

    from trl_envs.trainers.rollout_args import RolloutArguments

    class Model:
        config = Qwen2Config(
            vocab_size=300,
            max_position_embeddings=1024,
            hidden_size=8,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=8,
            num_hidden_layers=1,
        )

    assert RolloutArguments().model_limits(Model()) == {
        "max_context_tokens": 1024,
        "context_overflow": "end",
        "vocab_size": 300,
    }
    assert RolloutArguments(max_context_tokens=64).model_limits(Model())["max_context_tokens"] == 64


@pytest.mark.timeout(300)
def test_trainer_never_samples_past_the_models_positions(cpu_grpo_config, tiny_model_path, tokenizer):
    from trl_envs import EnvGRPOTrainer, ListRLDataset

    builders = [Group(lambda c, i: Turns(prompt_len=1100), size=4) for _ in range(2)]
    trainer = EnvGRPOTrainer(tiny_model_path, cpu_grpo_config(), ListRLDataset(builders, 2), processing_class=tokenizer)
    with pytest.raises(ContextBudgetError, match=r"Turns: the observation of turn 0 is 1100 tokens.* 1024 tokens"):
        trainer.train()


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("max_context_tokens", 0, "RolloutArguments.max_context_tokens must be an integer >= 1 or None"),
        ("context_overflow", "truncate", "RolloutArguments.context_overflow must be 'end' or 'error', got 'truncate'"),
    ],
)
def test_context_settings_are_checked_when_the_config_is_built(field, value, message):
    from trl_envs.trainers.rollout_args import RolloutArguments

    with pytest.raises(ValueError, match=message):
        RolloutArguments(**{field: value})


class OffVocabSampler(Sampler):
    pass


@pytest.mark.parametrize(
    "tokens, pattern",
    [
        ([7, 500], r"OffVocabSampler\.sample returned token id 500, outside the vocabulary \[0, 300\)"),
        ([-1, EOT], r"OffVocabSampler\.sample returned token id -1, outside the vocabulary"),
        (torch.tensor([7, EOT]), r"OffVocabSampler\.sample returned tokens as torch\.Tensor.*\.tolist\(\)"),
        ([7.0, 2.0], r"OffVocabSampler\.sample returned token 7\.0 of type float"),
        ([], r"OffVocabSampler\.sample returned 0 tokens"),
    ],
)
def test_bad_sampler_output_names_the_sampler(tokens, pattern):
    sampler = OffVocabSampler(lambda prompt, max_tokens: TokensWithLogprobs(tokens, None))
    with pytest.raises(EnvContractError, match=pattern):
        run_rollout_batch([Group()], sampler, RolloutBudget(vocab_size=300), RetryOnFailure(2))


def test_sampler_logprobs_must_match_tokens():
    sampler = OffVocabSampler(lambda prompt, max_tokens: TokensWithLogprobs([7, EOT], [-0.1]))
    with pytest.raises(EnvContractError, match=r"OffVocabSampler\.sample returned 1 logprobs for 2 tokens"):
        run_rollout_batch([Group()], sampler)


def test_cleanup_started_before_a_cancellation_still_runs_to_its_end():
    # a group that finished and is cleaning up when a sibling group fails must still finish its cleanup
    class SlowCleanup(Group):
        async def cleanup(self):
            await asyncio.sleep(0.2)
            self.cleaned += 1

    class FailsLate(Turns):
        async def step(self, action, *, extra=None):
            await asyncio.sleep(0.1)  # the healthy group is inside its cleanup by now
            raise RuntimeError("late failure")

    healthy, failing = SlowCleanup(), Group(lambda c, i: FailsLate())
    with pytest.raises(RuntimeError, match="late failure"):
        run_rollout_batch([healthy, failing], Sampler())
    assert healthy.cleaned == 1 and failing.cleaned == 1


# -- observations far beyond the budget are refused before they are tokenized ----------------------------------------


class HugeObservation(MessageEnv):
    """Asks a question; the turn ``at`` (0: the first observation) brings a 10 MB message."""

    def __init__(self, at: int):
        self.at, self.turn = at, 0

    def message(self) -> dict:
        content = "x" * 10_000_000 if self.turn == self.at else f"question {self.turn}"
        return {"role": "user", "content": content}

    async def initial_messages(self):
        return [self.message()]

    async def step(self, response):
        self.turn += 1
        return MessageStepResult(0.5, False, [self.message()])


@pytest.mark.parametrize(("at", "overflow"), [(0, "end"), (2, "error"), (2, "end")])
def test_a_10_mb_observation_is_refused_naming_env_and_budget_without_tokenizing_it(at, overflow, renderer):
    longest = []
    apply = renderer.tokenizer.apply_chat_template

    def recording(messages, **kwargs):
        longest.append(max(len(str(m.get("content", ""))) for m in messages))
        return apply(messages, **kwargs)

    renderer.tokenizer.apply_chat_template = recording
    try:
        sampler = Sampler(lambda prompt, max_tokens: TokensWithLogprobs([7, renderer.end_of_turn_token_id], None))
        budget = RolloutBudget(max_turns=5, max_tokens_per_turn=4, max_context_tokens=1024, context_overflow=overflow)
        builders = [Group(lambda c, i: MessageTokenEnv(HugeObservation(at), renderer), size=1)]
        if at == 0 or overflow == "error":
            with pytest.raises(ContextBudgetError) as raised:
                run_rollout_batch(builders, sampler, budget)
            message = str(raised.value)
            assert message.startswith(f"HugeObservation: the observation of turn {at} holds 10,000,0"), message
            assert "over the context budget of 1,024 tokens" in message and "it was not tokenized" in message
        else:
            trajectory = run_rollout_batch(builders, sampler, budget).groups[0].trajectories[0]
            assert trajectory.stop_reason == "max_tokens" and len(trajectory.transitions) == at
            assert [t.reward for t in trajectory.transitions] == [0.5] * (at - 1) + [0.0]  # the last went unanswered
    finally:
        renderer.tokenizer.apply_chat_template = apply
    assert max(longest, default=0) < 1000  # the 10 MB message never reached the tokenizer
