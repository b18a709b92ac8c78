"""Running environments against a policy: one episode, one group, a whole batch of groups.

* :func:`do_single_rollout` plays one :class:`~trl_envs.core.types.Env` to the end (or to a budget).
* :func:`do_group_rollout` makes a group's envs, plays them concurrently under an error strategy
  (:class:`FailFast` or :class:`RetryOnFailure`), adds the group rewards, and always awaits ``cleanup()``.
* :func:`run_rollout_batch` runs all groups of a batch concurrently on the process's long-lived rollout loop
  (``event_loop.run_sync``), with one batched sampler call per turn for all active episodes
  (:class:`~trl_envs.rollout.batching.BatchingPolicy`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from ..core.renderer import ObservationOverBudgetError, observation_token_limit
from ..core.types import (
    Env,
    EnvContractError,
    EnvGroupBuilder,
    StopCondition,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)
from ..errors.types import RunFailed
from ..samplers.base import Sampler
from .batching import BatchingPolicy
from .coupling import Coupling, EpisodeLinks, EpisodeState, SiblingEndedError, current_links
from .event_loop import cyclic_gc_paused, run_sync
from .validation import (
    ContextBudgetError,
    check_envs,
    check_group_rewards,
    check_initial,
    check_observation,
    check_sample,
    check_step_result,
    env_name,
    sampler_name,
)
from .watchdog import LoopWatchdog, note_activity, register_env_methods, run_with_deadline, run_with_timeout
from .worker_threads import use_abandonable_threads

logger = logging.getLogger(__name__)
T = TypeVar("T")


class TokenPolicy(Protocol):
    """``await policy(prompt, stop, max_tokens)`` → the sampled action. :class:`BatchingPolicy` is one."""

    def __call__(self, prompt: list[int], stop: StopCondition, max_tokens: int) -> Awaitable[TokensWithLogprobs]: ...


@dataclass
class RolloutBudget:
    """Limits on one episode.

    Attributes:
        max_turns: at most this many actions (``None``: no limit); the episode then stops with ``"max_turns"``.
        max_tokens_per_turn: at most this many sampled tokens per action.
        max_tokens_per_trajectory: at most this many sampled tokens over the episode (``None``: no limit); each
            turn's budget is cut to what is left, and the episode stops with ``"max_tokens"`` when none is.
        max_context_tokens: at most this many tokens of context (observation + the action sampled on it); ``None``:
            no limit. A trainer defaults it to the model's maximum positions. Each turn's budget is cut to the room
            left after the observation; an observation that leaves no room is never sampled: the episode stops with
            ``"max_tokens"``, or raises :class:`~trl_envs.rollout.validation.ContextBudgetError` (see
            ``context_overflow``). An initial observation that leaves no room always raises (there is nothing to
            train on).
        context_overflow: ``"end"`` (default) or ``"error"``: what an episode outgrowing ``max_context_tokens`` does.
        vocab_size: sampled token ids must lie in ``[0, vocab_size)`` (``None``: unchecked beyond ``>= 0``); a trainer
            sets it from the model.
        report_blocking_after_s: an env method that blocks the event loop this long is reported by name, once
            (``None``: never; see ``trl_envs.rollout.watchdog``).
        group_stall_timeout_s: a group none of whose live episodes asked for an action or got one for this long is
            failed with :class:`~trl_envs.rollout.coupling.GroupStalledError` naming it and what each env was doing
            (``None``: never). A safety net against hangs; raise it for envs whose single step legitimately takes
            longer.
    """

    max_turns: int | None = 16
    max_tokens_per_turn: int = 256
    max_tokens_per_trajectory: int | None = None
    max_context_tokens: int | None = None
    context_overflow: Literal["end", "error"] = "end"
    vocab_size: int | None = None
    report_blocking_after_s: float | None = 1.0
    group_stall_timeout_s: float | None = 600.0

    def __post_init__(self) -> None:
        if self.max_tokens_per_turn < 1:
            raise ValueError(f"RolloutBudget.max_tokens_per_turn must be >= 1, got {self.max_tokens_per_turn}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"RolloutBudget.max_turns must be >= 1 or None, got {self.max_turns}")
        for name in ("max_tokens_per_trajectory", "max_context_tokens", "vocab_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"RolloutBudget.{name} must be >= 1 or None, got {value}")
        if self.context_overflow not in ("end", "error"):
            raise ValueError(f"RolloutBudget.context_overflow must be 'end' or 'error', got {self.context_overflow!r}")
        if self.group_stall_timeout_s is not None and not self.group_stall_timeout_s > 0:
            raise ValueError(
                f"RolloutBudget.group_stall_timeout_s must be > 0 or None, got {self.group_stall_timeout_s}"
            )
        if self.report_blocking_after_s is not None and not self.report_blocking_after_s > 0:
            raise ValueError(
                f"RolloutBudget.report_blocking_after_s must be > 0 or None, got {self.report_blocking_after_s}"
            )


async def do_single_rollout(policy: TokenPolicy, env: Env, budget: RolloutBudget | None = None) -> Trajectory:
    """Play ``env`` to the end with ``policy`` and return the trajectory.

    Raises :class:`EnvContractError` naming the env (or the sampler) when it returns something of the wrong shape,
    and :class:`~trl_envs.rollout.validation.ContextBudgetError` when the episode outgrows
    ``budget.max_context_tokens`` with ``context_overflow="error"``. Under a :class:`BatchingPolicy`, an episode left
    waiting on a sibling that stopped early ends with stop reason ``"sibling_ended"`` (or raises
    :class:`~trl_envs.rollout.coupling.SiblingEndedError` before its first action), and one of a group that stopped
    making progress raises :class:`~trl_envs.rollout.coupling.GroupStalledError` (``trl_envs.rollout.coupling``).
    """
    budget = budget or RolloutBudget()
    scope = policy.episode() if hasattr(policy, "episode") else contextlib.nullcontext()
    async with scope as episode:
        if not isinstance(episode, EpisodeState):
            episode = None
        state = _EpisodeProgress(env, episode)
        try:
            trajectory = await _play(policy, env, budget, state)
        except asyncio.CancelledError:
            how = episode.take_ending() if episode is not None else None
            if how is None:
                raise
            return state.ended_by_engine(how)
        except BaseException as error:
            how = episode.take_ending() if episode is not None else None
            if how is not None:  # the env turned the engine's cancellation into an error of its own
                return state.ended_by_engine(how)
            if episode is not None:
                policy.stopped_early(episode, f"{state.label} failed with {type(error).__name__}")
            raise
        if trajectory.stop_reason != "done" and episode is not None:
            policy.stopped_early(episode, f"{state.label} stopped by {trajectory.stop_reason}")
        return trajectory


class _EpisodeProgress:
    """Where an episode is (for ending it where it waits, and for messages)."""

    def __init__(self, env: Env, episode: Any):
        self.env, self.episode = env, episode
        name = env_name(env)
        self.label = episode.links.label if episode is not None and episode.links is not None else name
        self.name = name
        self.runs = _runs(env)
        self.ob: list[int] | None = None
        self.transitions: list[Transition] = []
        self.stepping: Any = None  # the action whose step has not returned yet

    def doing(self, what: str) -> None:
        note_activity(what)
        if self.episode is not None:
            self.episode.activity = what

    def ended_by_engine(self, how: str | BaseException, stop_reason: str = "sibling_ended") -> Trajectory:
        if isinstance(how, BaseException):
            raise how
        transitions = list(self.transitions)
        if self.stepping is not None:  # its step never returned: the action is the last turn, unrewarded
            transitions.append(Transition(self.ob, self.stepping, 0.0, False, {}, {"ended": how}))
        if not transitions:
            raise SiblingEndedError(
                f"{self.label} was left waiting in {self.episode.activity} before its first action: {how}"
            )
        if stop_reason == "sibling_ended":
            logger.info("%s ended: left waiting after %s", self.label, how)
        final = list(self.ob) + list(self.stepping.tokens) if self.stepping is not None else list(self.ob)
        return Trajectory(transitions, final, stop_reason, _extends(self.env))


async def _play(policy: TokenPolicy, env: Env, budget: RolloutBudget, state: _EpisodeProgress) -> Trajectory:
    limit = observation_token_limit.set(budget.max_context_tokens)  # renderers refuse what cannot fit, untokenized
    try:
        return await _play_turns(policy, env, budget, state)
    except ObservationOverBudgetError as error:
        turn = len(state.transitions) + (state.stepping is not None)
        message = f"{state.name}: the observation of turn {turn} {error}"
        if turn == 0 or budget.context_overflow == "error" or state.stepping is None:
            raise ContextBudgetError(message) from None
        logger.debug("%s; the episode ends with stop reason 'max_tokens'", message)
        return state.ended_by_engine("its next observation is over the context budget", stop_reason="max_tokens")
    finally:
        observation_token_limit.reset(limit)


async def _play_turns(policy: TokenPolicy, env: Env, budget: RolloutBudget, state: _EpisodeProgress) -> Trajectory:
    name = state.name
    sampler = sampler_name(policy)
    max_turns, per_turn = budget.max_turns, budget.max_tokens_per_turn
    per_trajectory, context, vocab_size = budget.max_tokens_per_trajectory, budget.max_context_tokens, budget.vocab_size
    state.doing(f"{state.runs}, before its first turn" if state.runs else f"{name}.initial_observation")
    ob, stop = check_initial(env, await env.initial_observation())
    state.ob = ob
    transitions = state.transitions
    tokens_used = 0
    # ``observations_extend`` is read when the episode ends: an env may find out mid-episode that its
    # observations stop extending (the Tinker adapter does) and set it on the instance.
    while True:
        turn = len(transitions)
        max_tokens = per_turn
        cap = getattr(env, "max_tokens_next_turn", None)  # an env's own per-turn limit (Env.max_tokens_next_turn)
        if cap is not None and cap < max_tokens:
            max_tokens = cap
        if per_trajectory is not None:
            max_tokens = min(max_tokens, per_trajectory - tokens_used)
        if context is not None:
            room = context - len(ob)
            if room < 1:
                message = (
                    f"{name}: the observation of turn {turn} is {len(ob)} tokens, which leaves no room to "
                    f"sample under the context budget of {context} tokens "
                    "(max_context_tokens; a trainer defaults it to the model's maximum positions)"
                )
                if turn == 0 or budget.context_overflow == "error":
                    raise ContextBudgetError(message)
                logger.debug("%s; the episode ends with stop reason 'max_tokens'", message)
                return Trajectory(transitions, ob, "max_tokens", _extends(env))
            if room < max_tokens:
                max_tokens = room
        state.doing(f"sampling turn {turn} with {sampler}")
        ac = check_sample(policy, await policy(ob, stop, max_tokens), max_tokens, vocab_size)
        tokens_used += len(ac.tokens)
        state.doing(
            f"{state.runs}, after the model answered its call of turn {turn}"
            if state.runs
            else f"{name}.step (turn {turn})"
        )
        state.stepping = ac
        result = await env.step(ac.tokens, extra={"logprobs": ac.logprobs, "finish_reason": ac.finish_reason})
        state.stepping = None
        check_step_result(env, result, turn)
        transitions.append(
            Transition(ob, ac, float(result.reward), result.episode_done, dict(result.metrics), dict(result.logs))
        )
        if result.episode_done:
            return Trajectory(transitions, list(result.next_observation), "done", _extends(env))
        ob = check_observation(env, result.next_observation, "step")
        state.ob = ob
        stop = result.next_stop_condition
        if max_turns is not None and len(transitions) >= max_turns:
            return Trajectory(transitions, ob, "max_turns", _extends(env))
        if per_trajectory is not None and tokens_used >= per_trajectory:
            return Trajectory(transitions, ob, "max_tokens", _extends(env))


def _extends(env: Env) -> bool:
    return bool(getattr(env, "observations_extend", True))


# -- error strategies ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailFast:
    """The first rollout error of a group propagates; the group's other rollouts are cancelled.

    Args:
        per_rollout_timeout: seconds one rollout (and one ``make_envs`` / ``compute_group_rewards`` call) may take,
            counted as for :class:`RetryOnFailure`; past it a :class:`~trl_envs.rollout.watchdog.RolloutTimeoutError`
            naming the env and what it was doing propagates. ``None``: no limit.
    """

    per_rollout_timeout: float | None = None


@dataclass(frozen=True)
class RetryOnFailure:
    """Replace failed or timed-out rollouts by fresh envs from the builder.

    Args:
        max_retries: group-wide budget of retries, shared by replaced rollouts and repeated ``make_envs`` /
            ``compute_group_rewards`` calls that failed; when exceeded the group is skipped (returns ``None``, logged
            and counted) instead of crashing training. Contract errors (:class:`EnvContractError`) and
            :class:`UnrecoverableEnvError` are never retried; an :class:`EnvOutageError` (a server restart) is
            replayed without spending this budget.
        per_rollout_timeout: seconds one rollout may take (env, model and grading included; time its requests
            spend waiting for other episodes to join a sampling batch is not counted), and one ``make_envs`` or
            ``compute_group_rewards`` call; ``None``: no limit.
    """

    max_retries: int = 2
    per_rollout_timeout: float | None = None


ErrorStrategy = FailFast | RetryOnFailure


class GroupSkipped(Exception):
    """Raised inside :func:`do_group_rollout` when a :class:`RetryOnFailure` budget runs out."""


class SkipGroupError(Exception):
    """Raised by an env (or its builder) to say its group cannot be played -- e.g. its prompt is already over the
    token budget. Under every error strategy the group is skipped (``None`` in the batch) and counted, under its own
    type and as ``GroupSkipped``; it is never retried."""


class UnrecoverableEnvError(Exception):
    """Raised by an env whose failure no retry can mend -- e.g. the server it plays on stayed unreachable for its
    whole reconnect allowance. Never retried and never skipped: under every error strategy it propagates and stops the
    rollout batch (and the training run, non-zero, with its message)."""


class EnvOutageError(Exception):
    """Base of errors that say the env's infrastructure failed, not the episode -- e.g. the connection to the server
    it plays on dropped because the server restarted, which fails every episode in flight there at once. Under
    :class:`RetryOnFailure` such a failure is replayed without spending the group's ``max_retries`` (up to
    :data:`OUTAGE_RETRIES_PER_GROUP` times per group, then it spends as any error does); the env bounds the wait for
    its infrastructure itself (:class:`UnrecoverableEnvError` when it does not come back)."""


OUTAGE_RETRIES_PER_GROUP = 32
"""Replays of :class:`EnvOutageError` failures a group gets before they spend its ``max_retries``."""


class _GroupRetries:
    """A group's :class:`RetryOnFailure` budget (``None`` strategy: no retries, errors propagate)."""

    def __init__(self, strategy: ErrorStrategy, errors: Counter):
        self.retry = isinstance(strategy, RetryOnFailure)
        self.max_retries = strategy.max_retries if isinstance(strategy, RetryOnFailure) else 0
        self.left = self.max_retries
        self.outages_left = OUTAGE_RETRIES_PER_GROUP
        self.errors = errors

    def spend(self, error: BaseException, what: str) -> None:
        """Count ``error`` of ``what``; re-raise it (fail-fast, or a bug) or use one retry (:class:`GroupSkipped` when
        none is left)."""
        if (
            not self.retry
            or isinstance(error, (SkipGroupError, EnvContractError, UnrecoverableEnvError, RunFailed))
            or _out_of_memory(error)
        ):
            raise error  # a broken env is a bug; a gone server stays gone; a run that cannot go on, or out of memory,
            # is no env's bad luck: retrying would hide it
        is_timeout = isinstance(error, (asyncio.TimeoutError, TimeoutError))
        self.errors["TimeoutError" if is_timeout else type(error).__name__] += 1
        reason = f"{what}: {error}" if is_timeout else f"{what} failed with {type(error).__name__}: {error}"
        if isinstance(error, EnvOutageError) and self.outages_left > 0:
            self.outages_left -= 1
            logger.info("%s; replaying it (an outage of the env's server, not the episode's doing)", reason)
            return
        if self.left <= 0:
            raise GroupSkipped(f"{reason}; retry budget of {self.max_retries} used up") from error
        self.left -= 1
        logger.info("%s; retrying", reason)


def _out_of_memory(error: BaseException) -> bool:
    """Host or accelerator memory ran out (``MemoryError``, ``torch.OutOfMemoryError``): not the env's fault, and a
    retry would only run out again."""
    return isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError"


async def _builder_call(
    builder: EnvGroupBuilder,
    method: str,
    call: Callable[[], Coroutine[Any, Any, T]],
    strategy: ErrorStrategy,
    retries: _GroupRetries,
    check: Callable[[Any], T] = lambda v: v,
) -> T:
    """``check(await call())`` under the group's timeout, retried (fresh call) while ``retries`` allows."""
    what = f"{type(builder).__name__}.{method}"
    while True:
        try:
            return check(await run_with_timeout(call(), strategy.per_rollout_timeout, what))
        except Exception as e:  # noqa: BLE001 - counted and retried, or re-raised by spend()
            retries.spend(e, what)


async def do_group_rollout(
    builder: EnvGroupBuilder,
    policy: TokenPolicy,
    budget: RolloutBudget | None = None,
    strategy: ErrorStrategy = FailFast(),
    errors: Counter | None = None,
) -> TrajectoryGroup | None:
    """Roll out every env of ``builder``'s group and score the group.

    Returns ``None`` when :class:`RetryOnFailure` gave up on the group. Errors seen are counted by exception type
    into ``errors`` (and into the group's ``error_counts``). ``builder.cleanup()`` is always awaited; when it fails
    while an error is already propagating, that original error is raised with the cleanup failure in a note.
    """
    errors = errors if errors is not None else Counter()
    group_errors: Counter = Counter()
    setup = _Participant(policy)  # keeps the batch from being sampled before this group's episodes have started
    try:
        group = await _play_group(builder, policy, budget, strategy, group_errors, setup.release)
    except BaseException as original:
        setup.release()
        errors.update(group_errors)
        await _cleanup_after_error(builder, original)
        raise
    setup.release()
    errors.update(group_errors)
    try:
        await _cleanup(builder)
    except Exception as e:
        e.add_note(f"raised by {type(builder).__name__}.cleanup()")
        raise
    return group


_BASE_CLEANUP = EnvGroupBuilder.cleanup  # the no-op every builder inherits unless it overrides it


async def _cleanup(builder: EnvGroupBuilder) -> None:
    """Await ``builder.cleanup()`` to its end even when the group is cancelled meanwhile (a sibling group failed, the
    batch was interrupted): the cancellation is re-raised once the cleanup is done. A second cancellation stops the
    wait (the cleanup task runs on until the loop closes). A builder that keeps ``EnvGroupBuilder``'s own cleanup
    (which does nothing) costs no task."""
    if getattr(builder.cleanup, "__func__", None) is _BASE_CLEANUP:
        return
    task = asyncio.ensure_future(builder.cleanup())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError as cancelled:
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            cancelled.add_note(
                f"{type(builder).__name__}.cleanup() failed: {type(task.exception()).__name__}: {task.exception()}"
            )
        raise


async def _cleanup_after_error(builder: EnvGroupBuilder, original: BaseException) -> None:
    try:
        await _cleanup(builder)
    except Exception as cleanup_error:  # noqa: BLE001 - reported with the original error, which is raised
        original.add_note(
            f"While cleaning up after it, {type(builder).__name__}.cleanup() also failed: "
            f"{type(cleanup_error).__name__}: {cleanup_error}"
        )
        logger.error(
            "%s.cleanup() failed after %s", type(builder).__name__, type(original).__name__, exc_info=cleanup_error
        )


async def _play_group(
    builder: EnvGroupBuilder,
    policy: TokenPolicy,
    budget: RolloutBudget | None,
    strategy: ErrorStrategy,
    group_errors: Counter,
    after_start: Callable[[], None],
) -> TrajectoryGroup | None:
    retries = _GroupRetries(strategy, group_errors)
    try:
        register_env_methods(builder)
        envs = await _builder_call(
            builder,
            "make_envs",
            builder.make_envs,
            strategy,
            retries,
            lambda value: _registered(check_envs(builder, value)),
        )
        trajectories = await _rollouts(builder, envs, policy, budget, strategy, retries, after_start)
        ended = sum(t.stop_reason == "sibling_ended" for t in trajectories)
        if ended:
            group_errors["SiblingEnded"] += ended  # recorded: episodes ended because a sibling stopped early
        rewards, metrics = await _builder_call(
            builder,
            "compute_group_rewards",
            lambda: builder.compute_group_rewards(trajectories, envs),
            strategy,
            retries,
            lambda value: check_group_rewards(builder, value, len(trajectories)),
        )
    except GroupSkipped as e:
        logger.warning("skipping group of %s: %s", type(builder).__name__, e)
        group_errors["GroupSkipped"] += 1
        return None
    except SkipGroupError as e:
        logger.warning("skipping group of %s: %s", type(builder).__name__, e)
        group_errors[type(e).__name__] += 1
        group_errors["GroupSkipped"] += 1
        return None
    return TrajectoryGroup(
        trajectories, rewards, metrics, tags=list(builder.logging_tags()), error_counts=dict(group_errors)
    )


def _registered(envs: list[Env]) -> list[Env]:
    for env in envs:
        register_env_methods(env)  # so that the watchdog can name the env method that blocks the loop
    return envs


class _Participant:
    """One participant slot in a :class:`BatchingPolicy` (no-op for other policies), released at most once."""

    def __init__(self, policy: Any):
        self._batcher = policy if isinstance(policy, BatchingPolicy) else None
        if self._batcher is not None:
            self._batcher.join()

    def release(self) -> None:
        if self._batcher is not None:
            batcher, self._batcher = self._batcher, None
            batcher.leave()


async def _gather_fail_fast(
    coros: Sequence[Coroutine[Any, Any, T]], after_start: Callable[[], None] | None = None
) -> list[T]:
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
        running = [t for t in tasks if not t.done()]
        for t in running:
            t.cancel()
        for t in tasks:
            if t.done() and not t.cancelled():
                t.exception()  # retrieved: a second failure is not logged as "never retrieved"
        if running:  # wait for the cancelled ones to unwind (finished ones need no loop round-trip)
            await asyncio.gather(*running, return_exceptions=True)


async def _rollouts(
    builder: EnvGroupBuilder,
    envs: list[Env],
    policy: TokenPolicy,
    budget: RolloutBudget | None,
    strategy: ErrorStrategy,
    retries: _GroupRetries,
    after_start: Callable[[], None],
) -> list[Trajectory]:
    """Every env's trajectory, rolled out concurrently; under :class:`RetryOnFailure` failed ones are replaced."""
    name = type(builder).__name__
    units = _retry_units(builder, len(envs))
    group = Coupling(_own_name(builder, name))

    def rollout(i: int, unit: Coupling | None) -> Coroutine[Any, Any, Trajectory]:
        runs = _runs(envs[i])
        where = f"{name}: rollout {i} ({env_name(envs[i])}{' running ' + runs if runs else ''})"
        links = EpisodeLinks(group, unit, f"{group.name}: env {i} ({_own_name(envs[i], env_name(envs[i]))})")
        return _linked(
            links,
            run_with_deadline(lambda: do_single_rollout(policy, envs[i], budget), strategy.per_rollout_timeout, where),
        )

    def play(unit: list[int]) -> list[Coroutine[Any, Any, Trajectory]]:
        coupling = Coupling(f"{name}: coupled envs {unit}") if len(unit) > 1 else None  # fresh for each attempt
        return [rollout(i, coupling) for i in unit]

    if not retries.retry:
        order = [i for unit in units for i in unit]
        results = await _gather_fail_fast([c for unit in units for c in play(unit)], after_start)
        by_env = dict(zip(order, results))
        return [by_env[i] for i in range(len(envs))]

    trajectories: list[Trajectory | None] = [None] * len(envs)
    not_started = len(units)

    def unit_started() -> None:  # after_start once every unit's first episodes have registered with the batcher
        nonlocal not_started
        not_started -= 1
        if not_started == 0:
            after_start()

    async def one(unit: list[int]) -> None:
        started: Callable[[], None] | None = unit_started
        while True:
            try:
                results = await _gather_fail_fast(play(unit), started)
                for i, traj in zip(unit, results):
                    trajectories[i] = traj
                return
            except Exception as e:  # noqa: BLE001 - counted, then retried or the group skipped (or re-raised)
                started = None
                retries.spend(e, f"{name}: rollout {_unit_name(unit)}")
            fresh = await _builder_call(
                builder,
                "make_envs",
                builder.make_envs,
                strategy,
                retries,
                lambda value: _registered(check_envs(builder, value)),
            )
            if len(fresh) != len(envs):
                raise EnvContractError(
                    f"{name}.make_envs returned {len(fresh)} envs on retry, {len(envs)} the first time"
                )
            for i in unit:  # coupled envs (one game's players) are replaced together, from the same make_envs call
                envs[i] = fresh[i]

    await _gather_fail_fast([one(u) for u in units])
    return [t for t in trajectories if t is not None]


def _runs(env: Any) -> str | None:
    """What an env runs that messages should name instead of its own methods (``Env.runs``: an
    :class:`~trl_envs.agents.env.AgentEnv`'s agent function), or ``None``."""
    runs = getattr(env, "runs", None)
    return runs if isinstance(runs, str) and runs else None


def _own_name(obj: Any, default: str) -> str:
    """The name an adapter gives what it wraps (``TinkerEnv.name``: the cookbook env's class), else ``default``."""
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) and name else default


async def _linked(links: EpisodeLinks, rollout: Coroutine[Any, Any, T]) -> T:
    """Await ``rollout`` (one env's episode) with ``links`` as what it is coupled with (``coupling.current_links``)."""
    current_links.set(links)  # this task's own context: seen by the episode's batcher scope
    return await rollout


def _retry_units(builder: EnvGroupBuilder, n: int) -> list[list[int]]:
    """The sets of envs retried together: ``builder.coupled_envs()``, checked to cover each of the ``n`` envs once."""
    coupled = builder.coupled_envs() if hasattr(builder, "coupled_envs") else None
    if coupled is None:
        return [[i] for i in range(n)]
    units = [list(u) for u in coupled]
    if sorted(i for u in units for i in u) != list(range(n)) or any(not u for u in units):
        raise EnvContractError(
            f"{type(builder).__name__}.coupled_envs() must split the indices 0..{n - 1} of its "
            f"{n} envs into non-empty sets, each index once; got {coupled!r}"
        )
    return units


def _unit_name(unit: list[int]) -> str:
    return str(unit[0]) if len(unit) == 1 else "of coupled envs " + ", ".join(map(str, unit))


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
        num_idle_flushes: sampler calls sent while some episode had not asked because the event loop was quiet (it
            waited on a sibling: a turn-taking game).
        num_sibling_endings: episodes ended because a sibling they waited on stopped early (stop reason
            ``"sibling_ended"``); num_stalled_groups: groups failed by ``RolloutBudget.group_stall_timeout_s``.
    """

    groups: list[TrajectoryGroup | None]
    error_counts: dict[str, int] = field(default_factory=dict)
    num_sampler_calls: int = 0
    sampler_batch_sizes: list[int] = field(default_factory=list)
    wall_seconds: float = 0.0
    sampler_seconds: float = 0.0
    num_valve_flushes: int = 0
    num_idle_flushes: int = 0
    num_sibling_endings: int = 0
    num_stalled_groups: int = 0


async def run_rollout_batch_async(
    builders: Sequence[EnvGroupBuilder],
    sampler: Sampler,
    budget: RolloutBudget | None = None,
    strategy: ErrorStrategy = FailFast(),
    max_wait_s: float | None = 30.0,
    sample_on_loop_thread: bool = True,
) -> RolloutBatchResult:
    """Roll out all ``builders``' groups concurrently, sampling all active episodes together each turn
    (``sample_on_loop_thread``: :class:`~trl_envs.rollout.batching.BatchingPolicy`'s)."""
    budget = budget or RolloutBudget()
    batcher = BatchingPolicy(
        sampler,
        max_wait_s=max_wait_s,
        group_stall_timeout_s=budget.group_stall_timeout_s,
        sample_on_loop_thread=sample_on_loop_thread,
    )
    errors: Counter = Counter()
    start = time.perf_counter()
    use_abandonable_threads()  # an env's abandoned asyncio.to_thread call never holds up the end of the batch
    setup = _Participant(batcher)
    try:
        with LoopWatchdog(budget.report_blocking_after_s), batcher.as_current():
            groups = await _gather_fail_fast(
                [do_group_rollout(b, batcher, budget, strategy, errors) for b in builders], setup.release
            )
    finally:
        await batcher.wait_idle()  # the loop outlives the batch: never leave a generate call running behind it
    return RolloutBatchResult(
        groups,
        dict(errors),
        batcher.num_calls,
        list(batcher.batch_sizes),
        time.perf_counter() - start,
        batcher.sampler_seconds,
        batcher.num_valve_flushes,
        batcher.num_idle_flushes,
        batcher.num_sibling_endings,
        batcher.num_stalled_groups,
    )


def run_rollout_batch(
    builders: Sequence[EnvGroupBuilder],
    sampler: Sampler,
    budget: RolloutBudget | None = None,
    strategy: ErrorStrategy = FailFast(),
    max_wait_s: float | None = 30.0,
) -> RolloutBatchResult:
    """Synchronous :func:`run_rollout_batch_async` (works inside an already running event loop too)."""
    with cyclic_gc_paused():  # several full-heap collections per large batch otherwise (see cyclic_gc_paused)
        return run_sync(lambda: run_rollout_batch_async(builders, sampler, budget, strategy, max_wait_s))
