"""One check of everything an env, a builder or a sampler hands back to the rollout engine.

Each function raises :class:`~trl_envs.core.types.EnvContractError` naming who returned the value (the env or
builder class), the method, and the offending value, before the value travels anywhere it would fail obscurely
(advantages, metrics, torch, the tokenizer). :class:`ContextBudgetError` is the error of an episode that outgrew
its context budget (``RolloutBudget.max_context_tokens``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from ..core.types import Env, EnvContractError, StepResult, TokensWithLogprobs


class ContextBudgetError(ValueError):
    """An episode's observation left no room to sample under ``RolloutBudget.max_context_tokens`` and the budget says
    ``context_overflow="error"`` (or the very first observation was already too long)."""


def env_name(env: Any) -> str:
    """The class name users know an env by (the message env inside a ``MessageTokenEnv``)."""
    return type(env.unwrapped if isinstance(env, Env) else env).__name__


def sampler_name(policy: Any) -> str:
    """The class of the sampler behind ``policy``, looking through wrappers that keep theirs in ``.sampler``."""
    seen = 0
    while getattr(policy, "sampler", None) is not None and seen < 8:
        policy, seen = policy.sampler, seen + 1
    return type(policy).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _is_real(value: Any) -> bool:
    return type(value) is float or type(value) is int or isinstance(value, numbers.Real)


def check_envs(builder: Any, value: Any) -> list:
    """``make_envs()``'s envs: a non-empty sequence."""
    if isinstance(value, (str, bytes, Mapping)) or not hasattr(value, "__len__") or not hasattr(value, "__iter__"):
        raise EnvContractError(
            f"{type(builder).__name__}.make_envs must return a list of envs, got {type(value).__name__}"
        )
    envs = list(value)
    if not envs:
        raise EnvContractError(f"{type(builder).__name__}.make_envs returned no envs")
    return envs


def check_initial(env: Any, value: Any) -> tuple[list[int], Any]:
    """``initial_observation()``'s ``(observation, stop_condition)``."""
    if not (isinstance(value, tuple) and len(value) == 2):
        raise EnvContractError(
            f"{env_name(env)}.initial_observation must return (observation, stop_condition), got {type(value).__name__}"
        )
    ob, stop = value
    return check_observation(env, ob, "initial_observation"), stop


def check_observation(env: Any, ob: Any, where: str) -> list[int]:
    if type(ob) is list and (not ob or set(map(type, ob)) == {int}):
        return ob  # the common case, checked at C speed
    if not isinstance(ob, list) or not all(isinstance(t, int) for t in ob):
        raise EnvContractError(
            f"{env_name(env)}.{where} must give the observation as a list of token ids, got {type(ob).__name__}"
        )
    return ob


def check_step_result(env: Any, result: Any, turn: int) -> StepResult:
    """``step()``'s result: a :class:`StepResult` with a finite reward and numeric metrics."""
    if not isinstance(result, StepResult):
        raise EnvContractError(
            f"{env_name(env)}.step (turn {turn}) must return a StepResult, got {type(result).__name__}"
        )
    if not _is_real(result.reward) or not math.isfinite(result.reward):
        raise EnvContractError(
            f"{env_name(env)}.step (turn {turn}) returned reward={_short(result.reward)}; it must be a finite number"
        )
    if result.metrics:
        check_metrics(lambda: f"{env_name(env)}.step (turn {turn})", result.metrics)
    return result


def check_metrics(where: Callable[[], str], metrics: Any) -> dict[str, float]:
    """``metrics`` as a dict of real numbers; ``where()`` names their source in the error."""
    if not isinstance(metrics, Mapping):
        raise EnvContractError(f"{where()} returned metrics={_short(metrics)}; metrics must be a dict of numbers")
    for k, v in metrics.items():
        if not _is_real(v):
            raise EnvContractError(
                f"{where()} metric {k!r}={_short(v)} is not a number (put non-numeric values in logs)"
            )
    return dict(metrics)


def check_group_rewards(builder: Any, value: Any, num_trajectories: int) -> tuple[list[float], list[dict[str, float]]]:
    """``compute_group_rewards()``'s one ``(reward, metrics)`` per trajectory, rewards finite, metrics numbers."""
    where = f"{type(builder).__name__}.compute_group_rewards"
    if not isinstance(value, (list, tuple)) or len(value) != num_trajectories:
        raise EnvContractError(
            f"{where} must return one (reward, metrics) per trajectory ({num_trajectories}), got {_short(value)}"
        )
    rewards, metrics = [], []
    for i, item in enumerate(value):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise EnvContractError(f"{where} must return (reward, metrics) pairs; item {i} is {_short(item)}")
        reward, item_metrics = item
        if not _is_real(reward) or not math.isfinite(reward):
            raise EnvContractError(
                f"{where} returned reward={_short(reward)} for trajectory {i}; it must be a finite number"
            )
        rewards.append(float(reward))
        metrics.append(check_metrics(lambda i=i: f"{where} (trajectory {i})", item_metrics))
    return rewards, metrics


def check_sample(policy: Any, sample: Any, max_tokens: int, vocab_size: int | None) -> TokensWithLogprobs:
    """A sampled action: ``TokensWithLogprobs`` with 1..``max_tokens`` int ids in ``[0, vocab_size)``, logprobs
    ``None`` or one per token, ``finish_reason`` ``"stop"`` or ``"length"``."""
    tokens = getattr(sample, "tokens", None)
    if (
        isinstance(sample, TokensWithLogprobs)
        and type(tokens) is list
        and 1 <= len(tokens) <= max_tokens
        and set(map(type, tokens)) == {int}
        and min(tokens) >= 0
        and (vocab_size is None or max(tokens) < vocab_size)
        and (sample.logprobs is None or len(sample.logprobs) == len(tokens))
        and sample.finish_reason in ("stop", "length")
    ):
        return sample  # the common case, checked at C speed; what follows names the problem
    where = f"{sampler_name(policy)}.sample"
    if not isinstance(sample, TokensWithLogprobs):
        raise EnvContractError(f"{where} must return TokensWithLogprobs per request, got {type(sample).__name__}")
    if not isinstance(tokens, list):
        hint = " (convert with .tolist())" if hasattr(tokens, "tolist") else ""
        raise EnvContractError(
            f"{where} returned tokens as {type(tokens).__module__}.{type(tokens).__name__}; they "
            f"must be a list of ints{hint}"
        )
    if not 1 <= len(tokens) <= max_tokens:
        raise EnvContractError(
            f"{where} returned {len(tokens)} tokens for a request of at most {max_tokens}; a "
            "sampler returns between 1 and max_tokens"
        )
    for t in tokens:
        if type(t) is not int:
            raise EnvContractError(
                f"{where} returned token {_short(t)} of type {type(t).__name__}; token ids must be Python ints"
            )
        if t < 0 or (vocab_size is not None and t >= vocab_size):
            limit = f"[0, {vocab_size})" if vocab_size is not None else ">= 0"
            raise EnvContractError(f"{where} returned token id {t}, outside the vocabulary {limit}")
    if sample.logprobs is not None and len(sample.logprobs) != len(tokens):
        raise EnvContractError(
            f"{where} returned {len(sample.logprobs)} logprobs for {len(tokens)} tokens; give one per token, or None"
        )
    raise EnvContractError(f"{where} returned finish_reason={sample.finish_reason!r}; it must be 'stop' or 'length'")
