"""A tinker-cookbook ``EnvGroupBuilder`` as a trl_envs :class:`~trl_envs.core.types.EnvGroupBuilder`."""

from __future__ import annotations

from collections.abc import Sequence

from tinker_cookbook.rl import types as tc

from ..core.types import Env, EnvContractError, EnvGroupBuilder, Metrics, Trajectory
from .convert import cookbook_trajectory
from .env import TinkerEnv


class TinkerGroupBuilder(EnvGroupBuilder):
    """Makes, scores and cleans up the envs of one cookbook group.

    * :meth:`make_envs` wraps each cookbook env in a :class:`~trl_envs.tinker.env.TinkerEnv`;
    * :meth:`compute_group_rewards` calls the cookbook builder's with the trajectories in the cookbook's shapes
      (``Trajectory`` / ``Transition`` / ``TokensWithLogprobs`` with ``tinker.ModelInput`` observations, see
      :func:`~trl_envs.tinker.convert.cookbook_trajectory`) and the cookbook envs themselves;
    * :meth:`cleanup` and :meth:`logging_tags` are the cookbook builder's.

    Picklable when the cookbook builder is (the cookbook asks the same of its builders).

    Args:
        tinker_builder: a ``tinker_cookbook.rl.types.EnvGroupBuilder``.
        coupled: the envs of the group wait on each other (players of one game: the cookbook's two-player
            TextArena builder); ``RetryOnFailure`` then retries them together. Default: whether the builder
            declares ``num_players > 1``.
    """

    def __init__(self, tinker_builder: tc.EnvGroupBuilder, *, coupled: bool | None = None):
        if not isinstance(tinker_builder, tc.EnvGroupBuilder):
            raise TypeError(
                f"TinkerGroupBuilder: expected a tinker_cookbook EnvGroupBuilder, got {type(tinker_builder).__name__}"
            )
        self.tinker_builder = tinker_builder
        self.coupled = (getattr(tinker_builder, "num_players", 1) or 1) > 1 if coupled is None else coupled
        self._num_envs: int | None = None

    @property
    def name(self) -> str:
        return type(self.tinker_builder).__name__

    async def make_envs(self) -> Sequence[Env]:
        envs = list(await self.tinker_builder.make_envs())
        for i, env in enumerate(envs):
            if not isinstance(env, tc.Env):
                raise EnvContractError(
                    f"{self.name}.make_envs: item {i} is a {type(env).__name__}, not a tinker_cookbook Env"
                )
        self._num_envs = len(envs)
        return [TinkerEnv(env) for env in envs]

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        inner = [env.tinker_env if isinstance(env, TinkerEnv) else env for env in env_group]
        out = await self.tinker_builder.compute_group_rewards([cookbook_trajectory(t) for t in trajectory_group], inner)
        out = list(out)
        if len(out) != len(trajectory_group):
            raise EnvContractError(
                f"{self.name}.compute_group_rewards returned {len(out)} results for "
                f"{len(trajectory_group)} trajectories"
            )
        return [(float(reward), dict(metrics)) for reward, metrics in out]

    def coupled_envs(self) -> list[list[int]] | None:
        if not self.coupled or self._num_envs is None:
            return None
        return [list(range(self._num_envs))]

    async def cleanup(self) -> None:
        await self.tinker_builder.cleanup()

    def logging_tags(self) -> list[str]:
        return list(self.tinker_builder.logging_tags())
