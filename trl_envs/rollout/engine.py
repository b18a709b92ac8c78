"""Running environments against a policy: one episode, one group, a whole batch of groups.

* :func:`do_single_rollout` plays one :class:`~trl_envs.core.types.Env` to the end (or to a budget).
* :func:`do_group_rollout` makes a group's envs, plays them concurrently under an error strategy
  (:class:`FailFast` or :class:`RetryOnFailure`), adds the group rewards, and always awaits ``cleanup()``.
* :func:`run_rollout_batch` runs all groups of a batch concurrently on the process's long-lived rollout loop
  (``event_loop.run_sync``), with one batched sampler call per turn for all active episodes (:class:`~trl_envs.rollout.batching.BatchingSampler`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from .batching import BatchingSampler, rollout_clock
from .event_loop import cyclic_gc_paused, run_sync  # run_sync re-exported: the trainers and scripts import it here
from ..samplers.hf import Sampler
from ..core.types import Env, EnvContractError, EnvGroupBuilder, StepResult, StopCondition, TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition

logger = logging.getLogger(__name__)
T = TypeVar("T")


class TokenPolicy(Protocol):
    """``await policy(prompt, stop, max_tokens)`` → the sampled action. :class:`BatchingSampler` is one."""

    def __call__(self, prompt: list[int], stop: StopCondition, max_tokens: int) -> Awaitable[TokensWithLogprobs]: ...


@dataclass
class RolloutBudget:
    """Limits on one episode.

    Attributes:
        max_turns: at most this many actions (``None``: no limit); the episode then stops with ``"max_turns"``.
        max_tokens_per_turn: at most this many sampled tokens per action.
        max_tokens_per_trajectory: at most this many sampled tokens over the episode (``None``: no limit); each
            turn's budget is cut to what is left, and the episode stops with ``"max_tokens"`` when none is.
    """

    max_turns: int | None = 16
    max_tokens_per_turn: int = 256
    max_tokens_per_trajectory: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens_per_turn < 1:
            raise ValueError(f"RolloutBudget.max_tokens_per_turn must be >= 1, got {self.max_tokens_per_turn}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"RolloutBudget.max_turns must be >= 1 or None, got {self.max_turns}")


def _env_name(env: Any) -> str:
    inner = getattr(env, "message_env", None)
    return type(inner).__name__ if inner is not None else type(env).__name__


def _check_observation(env: Env, ob: Any, where: str) -> list[int]:
    if not isinstance(ob, list) or not all(isinstance(t, int) for t in ob):
        raise EnvContractError(f"{_env_name(env)}.{where} must give the observation as a list of token ids, "
                               f"got {type(ob).__name__}")
    return ob


async def do_single_rollout(policy: TokenPolicy, env: Env, budget: RolloutBudget | None = None) -> Trajectory:
    """Play ``env`` to the end with ``policy`` and return the trajectory.

    Raises :class:`EnvContractError` naming the env when it returns something of the wrong shape.
    """
    budget = budget or RolloutBudget()
    scope = policy.episode() if hasattr(policy, "episode") else contextlib.nullcontext()
    async with scope:
        initial = await env.initial_observation()
        if not (isinstance(initial, tuple) and len(initial) == 2):
            raise EnvContractError(f"{_env_name(env)}.initial_observation must return (observation, stop_condition), "
                                   f"got {type(initial).__name__}")
        ob, stop = initial
        _check_observation(env, ob, "initial_observation")
        transitions: list[Transition] = []
        tokens_used = 0
        extends = bool(getattr(env, "observations_extend", True))
        while True:
            max_tokens = budget.max_tokens_per_turn
            if budget.max_tokens_per_trajectory is not None:
                max_tokens = min(max_tokens, budget.max_tokens_per_trajectory - tokens_used)
            ac = await policy(ob, stop, max_tokens)
            tokens_used += len(ac.tokens)
            result = await env.step(ac.tokens, extra={"logprobs": ac.logprobs, "finish_reason": ac.finish_reason})
            _check_step_result(env, result, len(transitions))
            transitions.append(Transition(ob, ac, float(result.reward), result.episode_done,
                                          dict(result.metrics), dict(result.logs)))
            if result.episode_done:
                return Trajectory(transitions, list(result.next_observation), "done", extends)
            ob = _check_observation(env, result.next_observation, "step")
            stop = result.next_stop_condition
            if budget.max_turns is not None and len(transitions) >= budget.max_turns:
                return Trajectory(transitions, ob, "max_turns", extends)
            if budget.max_tokens_per_trajectory is not None and tokens_used >= budget.max_tokens_per_trajectory:
                return Trajectory(transitions, ob, "max_tokens", extends)


def _check_step_result(env: Env, result: Any, turn: int) -> None:
    if not isinstance(result, StepResult):
        raise EnvContractError(f"{_env_name(env)}.step (turn {turn}) must return a StepResult, "
                               f"got {type(result).__name__}")
    if not isinstance(result.reward, (int, float)) or not math.isfinite(result.reward):
        raise EnvContractError(f"{_env_name(env)}.step (turn {turn}) returned reward={result.reward!r}; "
                               "it must be a finite number")
    for k, v in result.metrics.items():
        if not isinstance(v, (int, float)):
            raise EnvContractError(f"{_env_name(env)}.step (turn {turn}) metric {k!r}={v!r} is not a number "
                                   "(put non-numeric values in logs)")


# -- error strategies ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailFast:
    """The first rollout error of a group propagates; the group's other rollouts are cancelled."""


@dataclass(frozen=True)
class RetryOnFailure:
    """Replace failed or timed-out rollouts by fresh envs from the builder.

    Args:
        max_retries: group-wide budget of replacements; when exceeded the group is skipped (returns ``None``,
            logged and counted) instead of crashing training.
        per_rollout_timeout: seconds one rollout may take (env, model and grading included; time its requests
            spend waiting for other episodes to join a sampling batch is not counted); ``None``: no limit.
    """

    max_retries: int = 2
    per_rollout_timeout: float | None = None


ErrorStrategy = FailFast | RetryOnFailure


class GroupSkipped(Exception):
    """Raised inside :func:`do_group_rollout` when a :class:`RetryOnFailure` budget runs out."""


async def do_group_rollout(builder: EnvGroupBuilder, policy: TokenPolicy, budget: RolloutBudget | None = None,
                           strategy: ErrorStrategy = FailFast(), errors: Counter | None = None
                           ) -> TrajectoryGroup | None:
    """Roll out every env of ``builder``'s group and score the group.

    Returns ``None`` when :class:`RetryOnFailure` gave up on the group. Errors seen are counted by exception type
    into ``errors`` (and into the group's ``error_counts``). ``builder.cleanup()`` is always awaited.
    """
    errors = errors if errors is not None else Counter()
    group_errors: Counter = Counter()
    setup = _Participant(policy)  # keeps the batch from being sampled before this group's episodes have started
    try:
        envs = list(await builder.make_envs())
        if not envs:
            raise EnvContractError(f"{type(builder).__name__}.make_envs returned no envs")
        if isinstance(strategy, RetryOnFailure):
            try:
                trajectories = await _rollouts_with_retries(builder, envs, policy, budget, strategy, group_errors,
                                                            setup.release)
            except GroupSkipped as e:
                logger.warning("skipping group of %s: %s", type(builder).__name__, e)
                group_errors["GroupSkipped"] += 1
                return None
        else:
            trajectories = await _gather_fail_fast([do_single_rollout(policy, e, budget) for e in envs], setup.release)
        group_rewards = await builder.compute_group_rewards(trajectories, envs)
        if not isinstance(group_rewards, (list, tuple)) or len(group_rewards) != len(trajectories):
            raise EnvContractError(f"{type(builder).__name__}.compute_group_rewards must return one (reward, metrics) "
                                   f"per trajectory ({len(trajectories)}), got {group_rewards!r:.200}")
        return TrajectoryGroup(trajectories, [float(r) for r, _ in group_rewards], [dict(m) for _, m in group_rewards],
                               tags=list(builder.logging_tags()), error_counts=dict(group_errors))
    finally:
        setup.release()
        errors.update(group_errors)
        await builder.cleanup()


class _Participant:
    """One participant slot in a :class:`BatchingSampler` (no-op for other policies), released at most once."""

    def __init__(self, policy: Any):
        self._batcher = policy if isinstance(policy, BatchingSampler) else None
        if self._batcher is not None:
            self._batcher.join()

    def release(self) -> None:
        if self._batcher is not None:
            batcher, self._batcher = self._batcher, None
            batcher.leave()


async def _gather_fail_fast(coros: Sequence[Coroutine[Any, Any, T]],
                            after_start: Callable[[], None] | None = None) -> list[T]:
    """Run ``coros`` as tasks; the first exception cancels the rest and propagates. ``after_start`` is called once
    every task has run its first step (for episodes: registered with the batcher)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        if after_start is not None:
            await asyncio.sleep(0)
            after_start()
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()
        return [t.result() for t in tasks]
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _rollouts_with_retries(builder: EnvGroupBuilder, envs: list[Env], policy: TokenPolicy,
                                 budget: RolloutBudget | None, strategy: RetryOnFailure, errors: Counter,
                                 after_start: Callable[[], None] | None = None) -> list[Trajectory]:
    retries_left = strategy.max_retries
    units = _retry_units(builder, len(envs))
    trajectories: list[Trajectory | None] = [None] * len(envs)
    not_started = len(units)

    def unit_started() -> None:  # after_start once every unit's first episodes have registered with the batcher
        nonlocal not_started
        not_started -= 1
        if not_started == 0 and after_start is not None:
            after_start()

    async def single(index: int) -> Trajectory:
        async with _timeout(strategy.per_rollout_timeout) as deadline:
            token = rollout_clock.set(_PausableClock(deadline) if deadline is not None else None)
            try:
                return await do_single_rollout(policy, envs[index], budget)
            finally:
                rollout_clock.reset(token)

    async def one(unit: list[int]) -> None:
        nonlocal retries_left
        started: Callable[[], None] | None = unit_started
        while True:
            try:
                results = await _gather_fail_fast([single(i) for i in unit], started)
                started = None
                for i, traj in zip(unit, results):
                    trajectories[i] = traj
                return
            except (asyncio.TimeoutError, TimeoutError):
                started = None
                errors["TimeoutError"] += 1
                reason = f"rollout {_unit_name(unit)} timed out after {strategy.per_rollout_timeout}s"
            except EnvContractError:
                raise  # a broken env is a bug, not bad luck: retrying would hide it
            except Exception as e:  # noqa: BLE001 - counted, then retried or the group skipped
                started = None
                errors[type(e).__name__] += 1
                reason = f"rollout {_unit_name(unit)} failed with {type(e).__name__}: {e}"
            if retries_left <= 0:
                raise GroupSkipped(f"{reason}; retry budget of {strategy.max_retries} used up")
            retries_left -= 1
            logger.info("%s; retrying with fresh envs", reason)
            fresh = list(await builder.make_envs())
            if len(fresh) != len(envs):
                raise EnvContractError(f"{type(builder).__name__}.make_envs returned {len(fresh)} envs on retry, "
                                       f"{len(envs)} the first time")
            for i in unit:  # coupled envs (one game's players) are replaced together, from the same make_envs call
                envs[i] = fresh[i]

    await _gather_fail_fast([one(u) for u in units])
    return [t for t in trajectories if t is not None]


def _retry_units(builder: EnvGroupBuilder, n: int) -> list[list[int]]:
    """The sets of envs retried together: ``builder.coupled_envs()``, checked to cover each of the ``n`` envs once."""
    coupled = builder.coupled_envs() if hasattr(builder, "coupled_envs") else None
    if coupled is None:
        return [[i] for i in range(n)]
    units = [list(u) for u in coupled]
    if sorted(i for u in units for i in u) != list(range(n)) or any(not u for u in units):
        raise EnvContractError(f"{type(builder).__name__}.coupled_envs() must split the indices 0..{n - 1} of its "
                               f"{n} envs into non-empty sets, each index once; got {coupled!r}")
    return units


def _unit_name(unit: list[int]) -> str:
    return str(unit[0]) if len(unit) == 1 else "of coupled envs " + ", ".join(map(str, unit))


def _timeout(seconds: float | None) -> contextlib.AbstractAsyncContextManager:
    """``asyncio.timeout`` (runs the body in the current task, so an episode registers with the batcher at once)."""
    if seconds is None:
        return contextlib.nullcontext()
    if hasattr(asyncio, "timeout"):
        return asyncio.timeout(seconds)
    return _WaitForTimeout(seconds)  # Python 3.10


class _WaitForTimeout:
    """The part of ``asyncio.Timeout`` used here (``when`` / ``reschedule``), for Python 3.10."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._handle: asyncio.TimerHandle | None = None
        self._when: float | None = None
        self._expired = False

    async def __aenter__(self):
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self.reschedule(self._loop.time() + self.seconds)
        return self

    def when(self) -> float | None:
        return self._when

    def reschedule(self, when: float | None) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._when = when
        self._handle = None if when is None else self._loop.call_at(when, self._expire)

    def _expire(self) -> None:
        self._expired = True
        self._task.cancel()

    async def __aexit__(self, exc_type, exc, tb):
        if self._handle is not None:
            self._handle.cancel()
        if exc_type is asyncio.CancelledError and self._expired:
            raise TimeoutError from exc
        return False


class _PausableClock:
    """Stops and restarts a rollout's deadline (see ``trl_envs.rollout.batching.rollout_clock``)."""

    def __init__(self, deadline: Any):
        self._deadline = deadline
        self._remaining: float | None = None

    def pause(self) -> None:
        when = self._deadline.when()
        if self._remaining is None and when is not None:
            self._remaining = max(0.0, when - asyncio.get_running_loop().time())
            self._deadline.reschedule(None)

    def resume(self) -> None:
        if self._remaining is not None:
            remaining, self._remaining = self._remaining, None
            with contextlib.suppress(RuntimeError):  # the rollout already left its timeout block
                self._deadline.reschedule(asyncio.get_running_loop().time() + remaining)


# -- batches ---------------------------------------------------------------------------------------------------


@dataclass
class RolloutBatchResult:
    """What :func:`run_rollout_batch` produced.

    Attributes:
        groups: one entry per builder, in order; ``None`` for a group skipped by :class:`RetryOnFailure`.
        error_counts: rollout errors by exception type (``GroupSkipped`` counts skipped groups).
        num_sampler_calls: calls made to the sampler; ``sampler_batch_sizes``: requests in each.
        wall_seconds: wall time of the whole batch; ``sampler_seconds``: the part spent inside the sampler.
        num_valve_flushes: sampler calls forced by the ``max_wait_s`` valve (0 when no episode stalled the batch).
    """

    groups: list[TrajectoryGroup | None]
    error_counts: dict[str, int] = field(default_factory=dict)
    num_sampler_calls: int = 0
    sampler_batch_sizes: list[int] = field(default_factory=list)
    wall_seconds: float = 0.0
    sampler_seconds: float = 0.0
    num_valve_flushes: int = 0


async def run_rollout_batch_async(builders: Sequence[EnvGroupBuilder], sampler: Sampler,
                                  budget: RolloutBudget | None = None, strategy: ErrorStrategy = FailFast(),
                                  max_wait_s: float | None = 30.0) -> RolloutBatchResult:
    """Roll out all ``builders``' groups concurrently, sampling all active episodes together each turn."""
    batcher = BatchingSampler(sampler, max_wait_s=max_wait_s)
    errors: Counter = Counter()
    start = time.perf_counter()
    setup = _Participant(batcher)
    groups = await _gather_fail_fast([do_group_rollout(b, batcher, budget, strategy, errors) for b in builders],
                                     setup.release)
    return RolloutBatchResult(groups, dict(errors), batcher.num_calls, list(batcher.batch_sizes),
                              time.perf_counter() - start, batcher.sampler_seconds, batcher.num_valve_flushes)


def run_rollout_batch(builders: Sequence[EnvGroupBuilder], sampler: Sampler, budget: RolloutBudget | None = None,
                      strategy: ErrorStrategy = FailFast(), max_wait_s: float | None = 30.0) -> RolloutBatchResult:
    """Synchronous :func:`run_rollout_batch_async` (works inside an already running event loop too)."""
    with cyclic_gc_paused():  # several full-heap collections per large batch otherwise (see cyclic_gc_paused)
        return run_sync(lambda: run_rollout_batch_async(builders, sampler, budget, strategy, max_wait_s))
