"""The rollout engine: group rewards, cleanup, error strategies, timeouts, cancellation, batched sampling, and the
training rows it leads to. Deterministic: scripted samplers stand in for the model."""

import asyncio
import math
import threading
import time
from collections import Counter

import pytest

from trl_envs import (
    Env,
    EnvContractError,
    EnvGroupBuilder,
    FailFast,
    RetryOnFailure,
    RolloutBudget,
    StepResult,
    TokensWithLogprobs,
    do_group_rollout,
    do_single_rollout,
    run_rollout_batch,
    run_rollout_batch_async,
    trajectory_to_data,
)
from trl_envs.core.message_env import MessageTokenEnv
from trl_envs.envs.guess_number import GuessNumberEnv, GuessNumberGroupBuilder

EOT = 2  # stop token used by the scripted token-level envs below


# -- scripted policies and toy envs ------------------------------------------------------------------------------


class ScriptedSampler:
    """A batched ``Sampler`` whose action for a request is ``respond(prompt, max_tokens)``; logs every call."""

    def __init__(self, respond=None):
        self.respond = respond or (lambda prompt, max_tokens: [7, EOT][:max_tokens])
        self.batch_sizes: list[int] = []
        self.requests = []
        self._lock = threading.Lock()

    def sample(self, requests):
        with self._lock:
            self.batch_sizes.append(len(requests))
            self.requests.append(list(requests))
        out = []
        for r in requests:
            tokens = list(self.respond(r.prompt, r.max_tokens))
            assert 1 <= len(tokens) <= r.max_tokens
            reason = "stop" if tokens[-1] in r.stop else "length"
            out.append(TokensWithLogprobs(tokens, [-0.5 - 0.01 * i for i in range(len(tokens))], reason))
        return out


async def simple_policy(prompt, stop, max_tokens):
    """An unbatched TokenPolicy for do_single_rollout / do_group_rollout."""
    await asyncio.sleep(0)
    return TokensWithLogprobs([7, EOT][:max_tokens], [-0.1, -0.2][:max_tokens])


class ToyEnv(Env):
    """``turns`` turns, reward ``reward`` per turn; observations extend token-exactly. Behaviour switches:
    ``fail_at`` (turn whose step raises ``error``), ``hang_at`` (turn whose step never returns)."""

    def __init__(self, turns=1, reward=1.0, fail_at=None, error=None, hang_at=None, step_delay=0.0, tag=None):
        self.turns, self.reward = turns, reward
        self.fail_at, self.error, self.hang_at, self.step_delay = fail_at, error, hang_at, step_delay
        self.tag = tag
        self.turn = 0
        self.ob = [100, 101]
        self.entered_hang = asyncio.Event()
        self.cancelled = False
        self.steps_started = 0

    async def initial_observation(self):
        return list(self.ob), [EOT]

    async def step(self, action, *, extra=None):
        self.steps_started += 1
        turn = self.turn
        self.turn += 1
        try:
            if self.step_delay:
                await asyncio.sleep(self.step_delay)
            if turn == self.hang_at:
                self.entered_hang.set()
                await asyncio.Event().wait()  # forever
            if turn == self.fail_at:
                raise self.error
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        done = self.turn >= self.turns
        self.ob = self.ob + list(action) + ([] if done else [50, 51])
        return StepResult(self.reward, done, list(self.ob), [EOT], metrics={"turn": float(turn)})


class ToyBuilder(EnvGroupBuilder):
    """Makes envs with ``make(call_index, env_index)``; records make_envs calls, group-reward calls, cleanup."""

    def __init__(self, make, size=2, group_rewards=None, cleanup_delay=0.01, tags=("toy",)):
        self.make, self.size, self.group_rewards_fn = make, size, group_rewards
        self.cleanup_delay, self.tags = cleanup_delay, list(tags)
        self.make_calls = 0
        self.made: list[list[Env]] = []
        self.cleaned = 0
        self.group_reward_calls = []

    async def make_envs(self):
        envs = [self.make(self.make_calls, i) for i in range(self.size)]
        self.make_calls += 1
        self.made.append(envs)
        return envs

    async def compute_group_rewards(self, trajectory_group, env_group):
        self.group_reward_calls.append((list(trajectory_group), list(env_group)))
        if self.group_rewards_fn is None:
            return await super().compute_group_rewards(trajectory_group, env_group)
        return self.group_rewards_fn(trajectory_group, env_group)

    async def cleanup(self):
        await asyncio.sleep(self.cleanup_delay)  # counts only if really awaited to the end
        self.cleaned += 1

    def logging_tags(self):
        return self.tags


def ok_builder(size=2, turns=1, **kw):
    return ToyBuilder(lambda call, i: ToyEnv(turns=turns), size=size, **kw)


# -- group rewards -----------------------------------------------------------------------------------------------


def test_group_rewards_are_added_to_step_rewards():
    def by_rank(trajectories, envs):
        return [(10.0 * i, {"rank": float(i)}) for i in range(len(trajectories))]

    builder = ToyBuilder(lambda call, i: ToyEnv(turns=2 + i, reward=0.5), size=3, group_rewards=by_rank)
    group = asyncio.run(do_group_rollout(builder, simple_policy))
    assert [t.step_reward for t in group.trajectories] == pytest.approx([1.0, 1.5, 2.0])
    assert group.group_rewards == [0.0, 10.0, 20.0]
    assert group.get_total_rewards() == pytest.approx([1.0, 11.5, 22.0])
    assert group.group_metrics == [{"rank": 0.0}, {"rank": 1.0}, {"rank": 2.0}]
    assert group.tags == ["toy"]
    # called once, after the whole group, with every trajectory and the envs make_envs returned, in order
    assert len(builder.group_reward_calls) == 1
    trajs, envs = builder.group_reward_calls[0]
    assert trajs == group.trajectories and envs == builder.made[0]
    assert [len(t.transitions) for t in trajs] == [2, 3, 4]


def test_default_group_reward_is_zero_and_wrong_count_is_rejected():
    group = asyncio.run(do_group_rollout(ok_builder(size=2), simple_policy))
    assert group.group_rewards == [0.0, 0.0]
    assert group.get_total_rewards() == [1.0, 1.0]
    bad = ok_builder(size=2, group_rewards=lambda t, e: [(1.0, {})])
    with pytest.raises(EnvContractError, match="ToyBuilder.compute_group_rewards must return one"):
        asyncio.run(do_group_rollout(bad, simple_policy))
    assert bad.cleaned == 1


def test_group_rewards_through_run_rollout_batch():
    builders = [ok_builder(size=2, group_rewards=lambda t, e: [(2.0, {}), (-1.0, {})]) for _ in range(2)]
    result = run_rollout_batch(builders, ScriptedSampler(), RolloutBudget(max_turns=4, max_tokens_per_turn=4))
    assert [g.get_total_rewards() for g in result.groups] == [[3.0, 0.0], [3.0, 0.0]]


# -- cleanup -----------------------------------------------------------------------------------------------------


def test_cleanup_awaited_on_success():
    builder = ok_builder()
    assert asyncio.run(do_group_rollout(builder, simple_policy)) is not None
    assert builder.cleaned == 1


@pytest.mark.timeout(20)
def test_fail_fast_propagates_first_error_cancels_siblings_and_cleans_up():
    class FailsOnceSiblingHangs(ToyEnv):
        def __init__(self, sibling):
            super().__init__(turns=3)
            self.sibling = sibling

        async def step(self, action, *, extra=None):
            await self.sibling.entered_hang.wait()
            raise RuntimeError("boom in env 0")

    hanging = ToyEnv(turns=3, hang_at=0)
    builder = ToyBuilder(lambda call, i: FailsOnceSiblingHangs(hanging) if i == 0 else hanging, size=2)
    with pytest.raises(RuntimeError, match="boom in env 0"):
        asyncio.run(do_group_rollout(builder, simple_policy, strategy=FailFast()))
    assert builder.made[0][1].cancelled  # the sibling stuck in its step was cancelled, not left running
    assert builder.cleaned == 1


def test_fail_fast_first_error_wins():
    class Slow(ToyEnv):
        async def step(self, action, *, extra=None):
            await asyncio.sleep(0.05)
            raise KeyError("late")

    builder = ToyBuilder(lambda call, i: ToyEnv(fail_at=0, error=ValueError("early")) if i == 0 else Slow(), size=2)
    with pytest.raises(ValueError, match="early"):
        asyncio.run(do_group_rollout(builder, simple_policy))
    assert builder.cleaned == 1


def test_cleanup_awaited_when_make_envs_fails():
    class Broken(ToyBuilder):
        async def make_envs(self):
            raise OSError("no sandbox")

    builder = Broken(None)
    with pytest.raises(OSError):
        asyncio.run(do_group_rollout(builder, simple_policy))
    assert builder.cleaned == 1


@pytest.mark.timeout(20)
def test_cleanup_awaited_on_timeout_and_group_skipped():
    builder = ToyBuilder(lambda call, i: ToyEnv(turns=2, hang_at=0), size=2)
    errors = Counter()
    start = time.perf_counter()
    group = asyncio.run(
        do_group_rollout(builder, simple_policy, strategy=RetryOnFailure(0, per_rollout_timeout=0.2), errors=errors)
    )
    assert time.perf_counter() - start < 5
    assert group is None
    assert errors["TimeoutError"] >= 1 and errors["GroupSkipped"] == 1
    assert builder.cleaned == 1
    assert all(e.cancelled for e in builder.made[0] if e.entered_hang.is_set())


@pytest.mark.timeout(20)
@pytest.mark.parametrize("strategy", [FailFast(), RetryOnFailure(2, per_rollout_timeout=30)])
def test_cleanup_awaited_when_group_rollout_is_cancelled(strategy):
    builder = ToyBuilder(lambda call, i: ToyEnv(turns=2, hang_at=1), size=2)

    async def main():
        task = asyncio.create_task(do_group_rollout(builder, simple_policy, strategy=strategy))
        while not (builder.made and all(e.entered_hang.is_set() for e in builder.made[0])):
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert builder.cleaned == 1
    assert all(e.cancelled for e in builder.made[0])
    assert builder.make_calls == 1  # cancellation is not an error to retry


@pytest.mark.timeout(20)
def test_cleanup_awaited_for_every_group_when_batch_is_cancelled():
    builders = [ToyBuilder(lambda call, i, k=k: ToyEnv(turns=3, hang_at=k), size=2) for k in range(3)]
    builders.append(ToyBuilder(lambda call, i: ToyEnv(turns=1), size=2))  # already finished when cancelled

    async def main():
        task = asyncio.create_task(run_rollout_batch_async(builders, ScriptedSampler(), RolloutBudget(max_turns=5)))
        # cancel while three groups are mid-episode (and the fourth finished and cleaned up)
        while not (builders[0].made and builders[0].made[0][0].entered_hang.is_set() and builders[3].cleaned):
            await asyncio.sleep(0.01)
        assert [b.cleaned for b in builders] == [0, 0, 0, 1]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [b.cleaned for b in builders] == [1, 1, 1, 1]


# -- RetryOnFailure ----------------------------------------------------------------------------------------------


def test_retry_replaces_failed_rollouts_with_fresh_envs():
    def make(call, i):  # first group: env 1 raises; every replacement works
        return ToyEnv(fail_at=0, error=ValueError("flaky")) if (call, i) == (0, 1) else ToyEnv(tag=(call, i))

    builder = ToyBuilder(make, size=3)
    result = run_rollout_batch([builder], ScriptedSampler(), strategy=RetryOnFailure(max_retries=2))
    group = result.groups[0]
    assert group is not None and len(group.trajectories) == 3
    assert builder.make_calls == 2
    assert result.error_counts == {"ValueError": 1}
    assert group.error_counts == {"ValueError": 1}
    assert group.get_total_rewards() == [1.0, 1.0, 1.0]
    # the failed env was replaced by the fresh env with the same index; compute_group_rewards sees the replacement
    _, envs = builder.group_reward_calls[0]
    assert [e.tag for e in envs] == [(0, 0), (1, 1), (0, 2)]
    assert builder.cleaned == 1


def test_retry_counts_errors_by_type():
    def make(call, i):
        if call == 0 and i == 0:
            return ToyEnv(fail_at=0, error=ValueError("a"))
        if call == 0 and i == 1:
            return ToyEnv(turns=2, fail_at=1, error=KeyError("b"))
        return ToyEnv()

    builder = ToyBuilder(make, size=2)
    result = run_rollout_batch([builder, ok_builder()], ScriptedSampler(), strategy=RetryOnFailure(max_retries=2))
    assert all(g is not None for g in result.groups)
    assert result.error_counts == {"ValueError": 1, "KeyError": 1}
    assert builder.make_calls == 3


def test_retry_budget_is_group_wide_and_exhaustion_skips_the_group():
    # two envs fail once each; a budget of one replacement for the whole group is not enough
    flaky = ToyBuilder(lambda call, i: ToyEnv(fail_at=0, error=ValueError("x")) if call == 0 else ToyEnv(), size=2)
    always = ToyBuilder(lambda call, i: ToyEnv(fail_at=0, error=ConnectionError("down")), size=2)
    healthy = ok_builder()
    result = run_rollout_batch([flaky, always, healthy], ScriptedSampler(), strategy=RetryOnFailure(max_retries=1))
    assert result.groups[0] is None and result.groups[1] is None
    assert result.groups[2] is not None and result.groups[2].get_total_rewards() == [1.0, 1.0]
    assert result.error_counts["GroupSkipped"] == 2
    assert result.error_counts["ValueError"] == 2
    assert result.error_counts["ConnectionError"] >= 2
    assert flaky.make_calls <= 2 and always.make_calls <= 2  # 1 + at most max_retries replacements
    assert [b.cleaned for b in (flaky, always, healthy)] == [1, 1, 1]


def test_retry_with_enough_budget_recovers():
    flaky = ToyBuilder(lambda call, i: ToyEnv(fail_at=0, error=ValueError("x")) if call == 0 else ToyEnv(), size=2)
    result = run_rollout_batch([flaky], ScriptedSampler(), strategy=RetryOnFailure(max_retries=2))
    assert result.groups[0] is not None
    assert result.error_counts == {"ValueError": 2}
    assert flaky.make_calls == 3


def test_retry_does_not_hide_contract_errors():
    builder = ToyBuilder(lambda call, i: ToyEnv(reward=float("nan")), size=2)
    with pytest.raises(EnvContractError, match="finite"):
        run_rollout_batch([builder], ScriptedSampler(), strategy=RetryOnFailure(max_retries=5))
    assert builder.make_calls == 1


def test_fail_fast_through_run_rollout_batch_cleans_up_every_group():
    bad = ToyBuilder(lambda call, i: ToyEnv(turns=2, fail_at=1, error=RuntimeError("env crashed")), size=2)
    others = [ok_builder(turns=3) for _ in range(2)]
    with pytest.raises(RuntimeError, match="env crashed"):
        run_rollout_batch([others[0], bad, others[1]], ScriptedSampler(), strategy=FailFast())
    assert [b.cleaned for b in (others[0], bad, others[1])] == [1, 1, 1]


def test_a_failed_batch_returns_only_after_its_last_sampler_call():
    """The rollout loop outlives the batch: a generate call started just before a fail-fast error must have
    finished when run_rollout_batch raises (the caller may go on to train the same model)."""
    calls = {"started": 0, "finished": 0}

    class SlowSampler(ScriptedSampler):
        def sample(self, requests):
            calls["started"] += 1
            time.sleep(0.3)
            out = super().sample(requests)
            calls["finished"] += 1
            return out

    bad = ToyBuilder(
        lambda call, i: ToyEnv(turns=3, fail_at=1, step_delay=0.05, error=RuntimeError("env crashed")), size=1
    )
    with pytest.raises(RuntimeError, match="env crashed"):
        run_rollout_batch([ok_builder(turns=3), bad], SlowSampler(), strategy=FailFast())
    assert calls["started"] == calls["finished"] >= 3


@pytest.mark.timeout(30)
@pytest.mark.parametrize("python310_timeout", [False, True])
def test_hanging_env_is_cut_by_per_rollout_timeout(monkeypatch, python310_timeout):
    if python310_timeout:  # the fallback used where asyncio.timeout does not exist
        monkeypatch.delattr(asyncio, "timeout")
    # the first env of the group hangs in step forever; its replacement works; other groups are not held up
    hanging = ToyBuilder(lambda call, i: ToyEnv(turns=2, hang_at=0) if (call, i) == (0, 0) else ToyEnv(turns=2), size=2)
    others = [ok_builder(turns=2) for _ in range(2)]
    start = time.perf_counter()
    result = run_rollout_batch(
        [hanging] + others, ScriptedSampler(), strategy=RetryOnFailure(max_retries=1, per_rollout_timeout=0.3)
    )
    elapsed = time.perf_counter() - start
    assert elapsed < 10, f"a hanging env stalled the batch for {elapsed:.1f}s"
    # healthy rollouts waiting in the sampling batch for the stuck one are not charged for that wait
    assert all(g is not None for g in result.groups), result.error_counts
    assert result.error_counts == {"TimeoutError": 1}
    assert hanging.made[0][0].cancelled
    assert hanging.make_calls == 2
    assert [len(t.transitions) for g in result.groups for t in g.trajectories] == [2] * 6


@pytest.mark.timeout(30)
def test_per_rollout_timeout_still_covers_model_time():
    class StuckModel(ScriptedSampler):
        def sample(self, requests):
            time.sleep(0.8)
            return super().sample(requests)

    builder = ok_builder()
    start = time.perf_counter()
    result = run_rollout_batch([builder], StuckModel(), strategy=RetryOnFailure(0, per_rollout_timeout=0.2))
    assert result.groups == [None]
    assert result.error_counts["TimeoutError"] >= 1 and result.error_counts["GroupSkipped"] == 1
    assert builder.cleaned == 1
    assert time.perf_counter() - start < 5


# -- budgets and contract errors ---------------------------------------------------------------------------------


def test_max_turns_budget():
    traj = asyncio.run(do_single_rollout(simple_policy, ToyEnv(turns=10), RolloutBudget(max_turns=3)))
    assert len(traj.transitions) == 3 and traj.stop_reason == "max_turns"
    assert traj.final_ob == traj.transitions[-1].ob + [7, EOT, 50, 51]


def test_token_budget_per_trajectory_shrinks_the_last_turn():
    seen = []

    async def policy(prompt, stop, max_tokens):
        seen.append(max_tokens)
        return TokensWithLogprobs([7] * min(3, max_tokens), None, "length")

    traj = asyncio.run(
        do_single_rollout(
            policy, ToyEnv(turns=10), RolloutBudget(max_turns=None, max_tokens_per_turn=3, max_tokens_per_trajectory=7)
        )
    )
    assert seen == [3, 3, 1]
    assert traj.num_action_tokens == 7 and traj.stop_reason == "max_tokens"


def test_episode_done_stops_and_passes_sampler_info_to_env():
    seen = {}

    class Recording(ToyEnv):
        async def step(self, action, *, extra=None):
            seen.update(extra)
            return await super().step(action, extra=extra)

    traj = asyncio.run(do_single_rollout(simple_policy, Recording(turns=1)))
    assert traj.stop_reason == "done" and len(traj.transitions) == 1
    assert seen == {"logprobs": [-0.1, -0.2], "finish_reason": "stop"}


class _Returns(Env):
    def __init__(self, initial=None, step_result=None):
        self.initial, self.step_result = initial, step_result

    async def initial_observation(self):
        return self.initial if self.initial is not None else ([1, 2], [EOT])

    async def step(self, action, *, extra=None):
        return self.step_result


class WrongStepEnv(_Returns):
    pass


class WrongInitialEnv(_Returns):
    pass


@pytest.mark.parametrize(
    "env, pattern",
    [
        (
            WrongStepEnv(step_result={"reward": 1.0}),
            r"WrongStepEnv\.step \(turn 0\) must return a StepResult, got dict",
        ),
        (WrongInitialEnv(initial=[1, 2, 3]), r"WrongInitialEnv\.initial_observation must return \(observation, "),
        (
            WrongInitialEnv(initial=("hello", [EOT])),
            r"WrongInitialEnv\.initial_observation must give the observation as",
        ),
        (WrongStepEnv(step_result=StepResult(float("nan"), True, [], [EOT])), r"WrongStepEnv\.step.*finite"),
        (WrongStepEnv(step_result=StepResult(float("inf"), True, [], [EOT])), r"WrongStepEnv\.step.*finite"),
        (WrongStepEnv(step_result=StepResult(None, True, [], [EOT])), r"WrongStepEnv\.step.*finite"),
        (WrongStepEnv(step_result=StepResult(1.0, False, "abc", [EOT])), r"WrongStepEnv\.step must give the observ"),
        (WrongStepEnv(step_result=StepResult(1.0, True, [], [EOT], metrics={"m": "x"})), r"metric 'm'.*not a number"),
    ],
)
def test_env_contract_errors_name_the_env(env, pattern):
    with pytest.raises(EnvContractError, match=pattern):
        asyncio.run(do_single_rollout(simple_policy, env))


def test_message_env_contract_errors_name_the_message_env(renderer, tokenizer):
    class ChattyEnv(GuessNumberEnv):
        async def step(self, response):
            return StepResult(0.0, True, [], [])

    with pytest.raises(EnvContractError, match="ChattyEnv.step must return a MessageStepResult"):
        asyncio.run(do_single_rollout(simple_policy, MessageTokenEnv(ChattyEnv(target=3), renderer)))

    class ChattyBuilder(GuessNumberGroupBuilder):
        async def make_envs(self):
            return [MessageTokenEnv(ChattyEnv(self.target), self.renderer) for _ in range(self.group_size)]

    # a broken env is a bug: RetryOnFailure must surface it, not retry it and silently skip the group
    with pytest.raises(EnvContractError, match="ChattyEnv"):
        run_rollout_batch([ChattyBuilder(renderer, 3, 2)], ScriptedSampler(), strategy=RetryOnFailure(3))


def test_builder_with_no_envs_is_named():
    class EmptyBuilder(ToyBuilder):
        async def make_envs(self):
            return []

    builder = EmptyBuilder(None)
    with pytest.raises(EnvContractError, match="EmptyBuilder.make_envs returned no envs"):
        run_rollout_batch([builder], ScriptedSampler())
    assert builder.cleaned == 1


def test_budget_validation():
    with pytest.raises(ValueError, match="max_tokens_per_turn"):
        RolloutBudget(max_tokens_per_turn=0)
    with pytest.raises(ValueError, match="max_turns"):
        RolloutBudget(max_turns=0)


# -- batched sampling over guess_number ---------------------------------------------------------------------------


def counting_guesser(tokenizer):
    """Guesses 1, 2, 3, ... : the guess is one more than the number of assistant turns already in the prompt."""
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def respond(prompt, max_tokens):
        text = tokenizer.decode(prompt, skip_special_tokens=False)
        guess = text.count("<|im_start|>assistant")  # includes the generation prompt
        return (tokenizer.encode(str(guess), add_special_tokens=False) + [eot])[:max_tokens]

    return respond


class SlowGuessEnv(GuessNumberEnv):
    """A guess_number game whose step waits on (pretend) I/O; records how many steps run at the same time."""

    in_flight = 0
    max_in_flight = 0

    async def step(self, response):
        cls = SlowGuessEnv
        cls.in_flight += 1
        cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
        try:
            await asyncio.sleep(0.05)
            return await super().step(response)
        finally:
            cls.in_flight -= 1


class SlowGuessBuilder(GuessNumberGroupBuilder):
    async def make_envs(self):
        return [
            MessageTokenEnv(SlowGuessEnv(self.target, self.low, self.high, self.max_guesses), self.renderer)
            for _ in range(self.group_size)
        ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("builder_cls", [GuessNumberGroupBuilder, SlowGuessBuilder])
def test_one_sampler_call_per_turn_for_the_whole_batch(renderer, tokenizer, builder_cls):
    targets = [1, 3, 5]  # the counting guesser wins on turn 1, 3 and 5
    builders = [builder_cls(renderer, target=t, group_size=2, max_guesses=6) for t in targets]
    sampler = ScriptedSampler(counting_guesser(tokenizer))
    SlowGuessEnv.max_in_flight = 0
    result = run_rollout_batch(builders, sampler, RolloutBudget(max_turns=10, max_tokens_per_turn=8))
    assert result.num_sampler_calls == 5 == len(sampler.batch_sizes)  # the longest episode's turns
    assert result.sampler_batch_sizes == [6, 4, 4, 2, 2] == sampler.batch_sizes  # shrinks as episodes end
    assert [[len(t.transitions) for t in g.trajectories] for g in result.groups] == [[1, 1], [3, 3], [5, 5]]
    assert [g.get_total_rewards() for g in result.groups] == [
        pytest.approx([1.0] * 2),
        pytest.approx([0.8] * 2),
        pytest.approx([0.6] * 2),
    ]
    if builder_cls is SlowGuessBuilder:
        assert SlowGuessEnv.max_in_flight == 6  # env waits overlap instead of queueing behind each other


def test_complete_batches_are_sampled_on_the_callers_thread_and_valve_calls_in_a_worker():
    """No thread hand-off when every live episode asked (issue 17); a valve call leaves the loop to the stuck env."""
    threads = []

    class WhereSampler(ScriptedSampler):
        def sample(self, requests):
            threads.append(threading.current_thread())
            return super().sample(requests)

    # env 1's first step takes 0.5 s: env 0's second request goes out alone through the 0.1 s valve
    builder = ToyBuilder(lambda call, i: ToyEnv(turns=2, step_delay=0.5 if i == 1 else 0.0), size=2)
    result = run_rollout_batch([builder], WhereSampler(), max_wait_s=0.1)
    assert result.sampler_batch_sizes == [2, 1, 1] and result.num_valve_flushes == 1
    assert threads[0] is threads[2] is threading.current_thread()
    assert threads[1] is not threading.current_thread() and threads[1].name.startswith("trl_envs-sampler")


def test_run_rollout_batch_works_inside_a_running_event_loop():
    async def notebook_cell():
        return run_rollout_batch([ok_builder()], ScriptedSampler())

    result = asyncio.run(notebook_cell())
    assert result.groups[0].get_total_rewards() == [1.0, 1.0]


# -- training rows from a real multi-turn rollout ----------------------------------------------------------------


def test_training_row_masks_env_tokens_and_aligns_logprobs(renderer, tokenizer):
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    result = run_rollout_batch(
        [GuessNumberGroupBuilder(renderer, target=3, group_size=1)],
        ScriptedSampler(counting_guesser(tokenizer)),
        RolloutBudget(max_turns=10),
    )
    traj = result.groups[0].trajectories[0]
    assert len(traj.transitions) == 3
    row = trajectory_to_data(traj)
    assert row.prompt_ids == traj.transitions[0].ob
    assert row.prompt_ids + row.completion_ids == traj.final_ob  # one sequence, exactly what the model saw
    assert len(row.mask) == len(row.logprobs) == len(row.completion_ids)

    # rebuild the expected layout: action, env tokens, action, env tokens, action
    expected_mask, expected_lp, pos = [], [], len(row.prompt_ids)
    for k, tr in enumerate(traj.transitions):
        if k:
            env_len = len(tr.ob) - pos
            assert tokenizer.decode(tr.ob[pos:]) == "\n<|im_start|>user\nHigher.<|im_end|>\n<|im_start|>assistant\n"
            expected_mask += [0] * env_len
            expected_lp += [0.0] * env_len
            pos += env_len
        expected_mask += [1] * len(tr.ac.tokens)
        expected_lp += tr.ac.logprobs
        assert row.completion_ids[pos - len(row.prompt_ids) :][: len(tr.ac.tokens)] == tr.ac.tokens
        pos += len(tr.ac.tokens)
    assert row.mask == expected_mask
    assert row.logprobs == pytest.approx(expected_lp)
    assert all(lp < 0 for lp, m in zip(row.logprobs, row.mask) if m == 1)
    sampled = [t for t, m in zip(row.completion_ids, row.mask) if m]
    assert tokenizer.decode(sampled) == "1<|im_end|>2<|im_end|>3<|im_end|>"
    assert row.completion_ids[-1] == eot and row.mask[-1] == 1  # ends with the last action's end of turn


def test_metrics_of_a_batch(renderer, tokenizer):
    from trl_envs.rollout.metrics import rollout_metrics, summarize

    builders = [GuessNumberGroupBuilder(renderer, target=t, group_size=2) for t in (1, 2)]
    result = run_rollout_batch(builders, ScriptedSampler(counting_guesser(tokenizer)))
    m = summarize(rollout_metrics(result.groups + [None], {"TimeoutError": 2}))
    assert m["env/all/turns"] == pytest.approx(1.5)
    assert m["env/guess_number/reward/total"] == pytest.approx((1.0 + 0.9) / 2)
    assert m["env/all/win"] == pytest.approx(1.0)
    assert m["env/all/skipped_groups"] == pytest.approx(1 / 3)
    assert m["env/all/errors/TimeoutError"] == pytest.approx(2 / 3)
    assert m["env/all/mixed_rewards"] == 0.0
    assert not any(math.isnan(v) for v in m.values())
