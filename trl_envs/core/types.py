"""The environment contract: what an environment, a group of environments and a dataset of groups are.

The vocabulary follows the Tinker cookbook's ``rl/types.py`` so that environments written for it port over
unchanged in spirit:

* An :class:`Env` is one episode. It is used once: :meth:`Env.initial_observation` is awaited first, then
  :meth:`Env.step` until a :class:`StepResult` says ``episode_done``. There is no reset.
* An observation is the *full* token context the model sees next (a list of token ids); an action is the list
  of token ids the model sampled; a stop condition tells the sampler when to stop (stop strings or stop token
  ids).
* An :class:`EnvGroupBuilder` makes the envs of one group. GRPO centres rewards over a group, and a group is also
  how multi-agent settings are written: the players of one game are the envs of one group, and
  :meth:`EnvGroupBuilder.compute_group_rewards` sees all of their trajectories at once.
* An :class:`RLDataset` is a sequence of batches of builders.

The total reward of a trajectory is the sum of its step rewards plus its group reward
(:meth:`TrajectoryGroup.get_total_rewards`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

Observation: TypeAlias = list[int]
"""The full token context the model sees next."""

Action: TypeAlias = list[int]
"""The token ids the model sampled for one turn."""

StopCondition: TypeAlias = list[str] | list[int]
"""Stop strings or stop token ids that end one sampling call."""

Metrics: TypeAlias = dict[str, float]
Logs: TypeAlias = dict[str, Any]

FinishReason: TypeAlias = Literal["stop", "length"]


@dataclass
class TokensWithLogprobs:
    """What the sampler returned for one prompt.

    Attributes:
        tokens: the sampled token ids, the stop token included when sampling ended on one.
        logprobs: the log-probability of each sampled token under the sampling distribution (same length as
            ``tokens``), or ``None`` when the sampler does not report them.
        finish_reason: ``"stop"`` when a stop token/string (or EOS) ended sampling, ``"length"`` when the token
            budget did.
    """

    tokens: list[int]
    logprobs: list[float] | None = None
    finish_reason: FinishReason = "stop"


@dataclass
class StepResult:
    """The outcome of one :meth:`Env.step`.

    Attributes:
        reward: the reward of this step.
        episode_done: ``True`` ends the episode; ``next_observation`` is then the final observation.
        next_observation: the full token context for the next turn. For token-exact multi-turn training it must
            start with the previous observation followed by the action tokens exactly as sampled.
        next_stop_condition: the stop condition for the next sampling call.
        metrics: numbers averaged into the training logs (``env/<tag>/<name>``).
        logs: anything for display only; never aggregated.
    """

    reward: float
    episode_done: bool
    next_observation: Observation
    next_stop_condition: StopCondition
    metrics: Metrics = field(default_factory=dict)
    logs: Logs = field(default_factory=dict)


@dataclass
class Transition:
    """One turn of an episode: what the model saw, what it did, what it got."""

    ob: Observation
    ac: TokensWithLogprobs
    reward: float
    episode_done: bool
    metrics: Metrics = field(default_factory=dict)
    logs: Logs = field(default_factory=dict)


StopReason: TypeAlias = Literal["done", "max_turns", "max_tokens", "sibling_ended"]


@dataclass
class Trajectory:
    """One episode.

    Attributes:
        transitions: the turns, in order.
        final_ob: the observation after the last step.
        stop_reason: ``"done"`` when the env ended the episode, ``"max_turns"`` / ``"max_tokens"`` when a rollout
            budget did, ``"sibling_ended"`` when the engine ended it because it was left waiting on a sibling env
            that stopped early (``trl_envs.rollout.coupling``).
    """

    transitions: list[Transition]
    final_ob: Observation
    stop_reason: StopReason = "done"
    observations_extend: bool = True
    """Copied from the env's :attr:`Env.observations_extend`: ``False`` makes every turn its own training row."""

    @property
    def step_reward(self) -> float:
        """The sum of the rewards of all steps."""
        return float(sum(t.reward for t in self.transitions))

    @property
    def num_action_tokens(self) -> int:
        """How many tokens the model sampled over the whole episode."""
        return sum(len(t.ac.tokens) for t in self.transitions)


@dataclass
class TrajectoryGroup:
    """The trajectories of one group, with the group rewards from :meth:`EnvGroupBuilder.compute_group_rewards`.

    Attributes:
        trajectories: one per env of the group, in the order of :meth:`EnvGroupBuilder.make_envs`.
        group_rewards: one group reward per trajectory.
        group_metrics: one metrics dict per trajectory, from ``compute_group_rewards``.
        tags: the builder's :meth:`EnvGroupBuilder.logging_tags`.
        error_counts: rollout errors seen (and recovered from) while producing this group, by exception type.
    """

    trajectories: list[Trajectory]
    group_rewards: list[float]
    group_metrics: list[Metrics]
    tags: list[str] = field(default_factory=list)
    error_counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.trajectories)
        if len(self.group_rewards) != n or len(self.group_metrics) != n:
            raise ValueError(
                f"TrajectoryGroup: {n} trajectories but {len(self.group_rewards)} group rewards and "
                f"{len(self.group_metrics)} group metrics; compute_group_rewards must return one per trajectory."
            )

    def get_total_rewards(self) -> list[float]:
        """Per trajectory: the sum of its step rewards plus its group reward."""
        return [t.step_reward + g for t, g in zip(self.trajectories, self.group_rewards)]


class EnvContractError(TypeError):
    """An env, builder or renderer broke the contract of this module (wrong return type, empty group, an episode
    that continues with nothing new to answer...). It is a bug, so error strategies never retry it."""


class Env(ABC):
    """One episode of an environment. Single use: no reset.

    Contract:

    * :meth:`initial_observation` is awaited exactly once, before any :meth:`step`.
    * :meth:`step` is awaited with each sampled action until it returns ``episode_done=True``; it is never called
      after that.
    * Envs of one rollout batch run concurrently in one asyncio event loop: await I/O, never block the loop.

    Attributes:
        observations_extend: ``True`` (default) promises that every observation starts with the previous
            observation followed by the action tokens exactly as sampled, so one episode trains as one sequence.
            Set it to ``False`` for envs whose observations do not (a fresh board each turn, a summarised history,
            thinking stripped): each turn then becomes its own training row sharing the trajectory's advantage.
    """

    observations_extend: bool = True
    max_tokens_next_turn: int | None = None
    """At most this many tokens for the next action, read before each turn (``None``: the rollout budget alone
    decides; otherwise the lower of the two). An env sets it from ``initial_observation`` / ``step`` when the other
    side asks for a shorter reply (an agent's ``max_tokens``)."""

    @property
    def unwrapped(self) -> Any:
        """The object that defines this episode, under any adapter layers (as Gymnasium's ``Env.unwrapped``): the env
        itself for a plain env, the :class:`~trl_envs.core.message_env.MessageEnv` for a ``MessageTokenEnv``. What an
        outer layer may ask of a wrapped env: its type for error messages, its game state for group rewards."""
        return self

    @abstractmethod
    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        """Return the first observation (full token context) and the stop condition for the first turn."""

    @abstractmethod
    async def step(self, action: Action, *, extra: dict[str, Any] | None = None) -> StepResult:
        """Apply the sampled ``action`` tokens and return the outcome.

        ``extra`` carries what the sampler knew about the action: ``logprobs`` and ``finish_reason``.
        """


class EnvGroupBuilder(ABC):
    """Makes the envs of one group and scores the group as a whole.

    Builders should be picklable (they travel between processes and may be stored in datasets).
    """

    @abstractmethod
    async def make_envs(self) -> Sequence[Env]:
        """Return the envs of this group (for GRPO: ``num_generations`` of them, all on the same problem)."""

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        """Return one ``(group_reward, metrics)`` per trajectory, called once after the whole group finished.

        The group reward is added to the trajectory's step rewards. The default gives every trajectory 0.
        """
        return [(0.0, {}) for _ in trajectory_group]

    def coupled_envs(self) -> list[list[int]] | None:
        """Envs of the group that wait on each other (the players of one game), as lists of indices into
        :meth:`make_envs`' result, covering every env once; ``None`` (default): every env runs on its own.

        ``RetryOnFailure`` retries coupled envs together: when one fails, the others of its set are cancelled and
        the whole set is replaced from a fresh :meth:`make_envs` call (one retry of the budget), so no player is
        left waiting on an opponent that is never played.
        """
        return None

    async def cleanup(self) -> None:  # noqa: B027 - a hook whose default does nothing
        """Release what :meth:`make_envs` acquired. Always awaited: after success, error, timeout and cancellation."""

    def logging_tags(self) -> list[str]:
        """Tags under which this group's metrics are also reported (``env/<tag>/...``)."""
        return []


class RLDataset(ABC):
    """A sequence of batches of :class:`EnvGroupBuilder`; ``len()`` is the number of batches."""

    @abstractmethod
    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        """Return the builders of batch ``index`` (``0 <= index < len(self)``)."""

    @abstractmethod
    def __len__(self) -> int: ...


TEST_SEED_OFFSET = 1_000_000
"""Where a dataset builder's seeded test set starts: the built-in envs and the Gymnasium datasets make their test set
with ``seed + TEST_SEED_OFFSET`` (their training set with ``seed``). Far above any training index, so seeds of the
form ``seed + episode_index`` (Gymnasium) never reach the test seeds."""


class RLDatasetBuilder(ABC):
    """Builds the ``(train, test_or_None)`` datasets of an experiment (configuration lives on the builder)."""

    @abstractmethod
    async def __call__(self) -> tuple[RLDataset, RLDataset | None]: ...


class ListRLDataset(RLDataset):
    """An :class:`RLDataset` over a fixed list of builders, cut into batches of ``batch_size`` groups."""

    def __init__(self, builders: Sequence[EnvGroupBuilder], batch_size: int):
        if batch_size < 1:
            raise ValueError(f"ListRLDataset: batch_size must be >= 1, got {batch_size}")
        if not builders:
            raise ValueError("ListRLDataset: no builders given")
        self.builders = list(builders)
        self.batch_size = batch_size

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < len(self):
            raise IndexError(f"ListRLDataset: batch {index} out of range (0..{len(self) - 1})")
        return self.builders[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return -(-len(self.builders) // self.batch_size)
