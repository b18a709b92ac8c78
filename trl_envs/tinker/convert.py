"""Conversions between tinker-cookbook's data shapes and trl_envs' (token-exact).

* observations: ``tinker.ModelInput`` <-> ``list[int]`` (text chunks only; an image chunk is an error naming the
  env, since the trainers here train text models);
* stop conditions: the cookbook's ``StopCondition`` (stop strings or stop token ids) is the same shape as ours;
* what a step is told about its action: our ``extra={"finish_reason": ...}`` -> the cookbook's
  ``ActionExtra(stop_reason=...)``;
* trajectories: our :class:`~trl_envs.core.types.Trajectory` -> the cookbook's ``Trajectory`` / ``Transition`` /
  ``TokensWithLogprobs``, which is what a cookbook ``compute_group_rewards`` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tinker
from tinker_cookbook import completers as tc_completers
from tinker_cookbook.rl import types as tc

from ..core.types import EnvContractError, StopCondition, Trajectory

_STOP_REASONS = {"max_turns": tc.StopReason.MAX_TURNS, "max_tokens": tc.StopReason.MAX_SAMPLED_TOKENS}


def tokens_of(observation: Any, where: str) -> list[int]:
    """The token ids of a cookbook observation (a ``tinker.ModelInput``; a plain token list is accepted too).

    Raises ``EnvContractError`` naming ``where`` for image chunks or anything that is not an observation.
    """
    if isinstance(observation, tinker.ModelInput):
        for chunk in observation.chunks:
            if not isinstance(chunk, tinker.EncodedTextChunk):
                raise EnvContractError(
                    f"{where}: the observation holds a {type(chunk).__name__}; only text "
                    "(EncodedTextChunk) observations can be trained here"
                )
        return [int(t) for t in observation.to_ints()]
    if isinstance(observation, (list, tuple)) and all(isinstance(t, int) for t in observation):
        return list(observation)
    raise EnvContractError(f"{where}: expected a tinker.ModelInput observation, got {type(observation).__name__}")


def model_input_of(tokens: Sequence[int]) -> tinker.ModelInput:
    """The ``tinker.ModelInput`` of a token list (one text chunk; empty for no tokens)."""
    return tinker.ModelInput.from_ints(list(tokens)) if tokens else tinker.ModelInput.empty()


def stop_condition_of(stop: Any, where: str) -> StopCondition:
    """A cookbook stop condition as ours: a list of stop strings or of stop token ids (unchanged)."""
    stop = list(stop)
    if all(isinstance(s, str) for s in stop) or all(isinstance(s, int) for s in stop):
        return stop
    raise EnvContractError(f"{where}: a stop condition is a list of strings or of token ids, got {stop!r}")


def action_extra_of(extra: dict[str, Any] | None) -> tc.ActionExtra:
    """The cookbook's ``ActionExtra`` for the ``extra`` our rollout passes to ``step``: the sampler stopped on a
    stop sequence (``"stop"``) or on the token budget (``"length"``)."""
    reason = (extra or {}).get("finish_reason", "stop")
    return tc.ActionExtra(stop_reason="length" if reason == "length" else "stop")


def cookbook_trajectory(trajectory: Trajectory) -> tc.Trajectory:
    """Our trajectory in the cookbook's shape: the same tokens, logprobs, rewards, metrics and logs.

    ``stop_reason``: a rollout budget maps to ``max_turns`` / ``max_sampled_tokens``; an episode the env ended takes
    the ``stop/<reason>`` metric of its last transition, as the cookbook's rollout does, else ``None``.
    """
    transitions = [
        tc.Transition(
            ob=model_input_of(t.ob),
            ac=tc_completers.TokensWithLogprobs(
                tokens=list(t.ac.tokens),
                maybe_logprobs=None if t.ac.logprobs is None else list(t.ac.logprobs),
                stop_reason="length" if t.ac.finish_reason == "length" else "stop",
            ),
            reward=t.reward,
            episode_done=t.episode_done,
            metrics=dict(t.metrics),
            logs=dict(t.logs),
        )
        for t in trajectory.transitions
    ]
    reason = _STOP_REASONS.get(trajectory.stop_reason)
    if reason is None and transitions:
        hits = [
            k[len(tc.STOP_METRIC_PREFIX) :]
            for k, v in transitions[-1].metrics.items()
            if k.startswith(tc.STOP_METRIC_PREFIX) and v
        ]
        reason = hits[0] if hits else None
    return tc.Trajectory(
        transitions=transitions,
        final_ob=model_input_of(trajectory.final_ob),
        stop_reason=None if reason is None else str(reason),
    )
