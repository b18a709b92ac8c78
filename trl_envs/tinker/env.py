"""One tinker-cookbook ``Env`` as a trl_envs :class:`~trl_envs.core.types.Env`."""

from __future__ import annotations

from typing import Any

from tinker_cookbook.rl import types as tc

from ..core.types import Action, Env, Observation, StepResult, StopCondition
from ..rollout.engine import SkipGroupError
from .convert import action_extra_of, stop_condition_of, tokens_of


class InitialObservationOverflowError(SkipGroupError, RuntimeError):
    """The cookbook env said its prompt is already over its token budget (``InitialObservationOverflow``): a sentinel
    the cookbook means as "skip this group", so the group is skipped and counted under every error strategy."""


class TinkerEnv(Env):
    """Plays a tinker-cookbook ``Env`` through the trl_envs contract, token-exactly.

    The cookbook env gets exactly the sampled tokens as its action (stop token included, as tinker's sampler
    returns them) and an ``ActionExtra`` with the sampler's ``stop_reason``; its ``tinker.ModelInput`` observations
    become token lists holding the same ids, so the tokens trained on are the ones the env saw and the model
    sampled.

    Cookbook envs usually re-render the whole conversation each turn. Whether that extends the previous context
    token-exactly depends on the template and on what was sampled, so it is checked at every turn: as soon as an
    observation is not ``previous observation + action + new tokens``, :attr:`observations_extend` becomes ``False``
    for this episode and it trains as one row per turn (each turn's row is the observation the env gave and the
    action sampled from it), never as a silently wrong single sequence.

    Attributes:
        tinker_env: the wrapped cookbook env (what :meth:`TinkerGroupBuilder.compute_group_rewards` hands back to
            the cookbook builder).
    """

    def __init__(self, tinker_env: tc.Env):
        self.tinker_env = tinker_env
        self.observations_extend = True  # instance attribute, read by the rollout when the episode ends
        self._context: list[int] = []

    @property
    def name(self) -> str:
        return type(self.tinker_env).__name__

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        out = await self.tinker_env.initial_observation()
        if isinstance(out, tc.InitialObservationOverflow):
            raise InitialObservationOverflowError(
                f"{self.name}: the initial prompt is over the env's token budget ({out.logs or out.metrics})"
            )
        ob, stop = out
        tokens = tokens_of(ob, f"{self.name}.initial_observation")
        self._context = tokens
        return tokens, stop_condition_of(stop, f"{self.name}.initial_observation")

    async def step(self, action: Action, *, extra: dict[str, Any] | None = None) -> StepResult:
        action = list(action)
        result = await self.tinker_env.step(action, extra=action_extra_of(extra))
        where = f"{self.name}.step"
        if not isinstance(result, tc.StepResult):
            from ..core.types import EnvContractError

            raise EnvContractError(f"{where} must return a tinker_cookbook StepResult, got {type(result).__name__}")
        next_ob = tokens_of(result.next_observation, where)
        if not result.episode_done:
            expected = self._context + action
            if next_ob[: len(expected)] != expected:
                self.observations_extend = False
            self._context = next_ob
        return StepResult(
            reward=float(result.reward),
            episode_done=bool(result.episode_done),
            next_observation=next_ob,
            next_stop_condition=stop_condition_of(result.next_stop_condition, where),
            metrics=dict(result.metrics),
            logs=dict(result.logs),
        )
