"""Multi-turn environments written in chat messages, turned into token :class:`Env` s by the library."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from .renderer import Message, ParsedResponse, Renderer
from .types import Action, Env, EnvContractError, Logs, Metrics, Observation, StepResult, StopCondition


@dataclass
class MessageStepResult:
    """The outcome of one :meth:`MessageEnv.step`.

    Attributes:
        reward: this step's reward.
        episode_done: ``True`` ends the episode.
        next_messages: the messages the env adds (usually one ``user`` or ``tool`` message); required unless the
            episode is done.
        metrics / logs: as in :class:`~trl_envs.core.types.StepResult`.
    """

    reward: float
    episode_done: bool
    next_messages: list[Message] = field(default_factory=list)
    metrics: Metrics = field(default_factory=dict)
    logs: Logs = field(default_factory=dict)


class MessageEnv(ABC):
    """A multi-turn env that speaks chat messages instead of tokens.

    Write :meth:`initial_messages` and :meth:`step`; wrap it in :class:`MessageTokenEnv` (done for you by builders
    that take a renderer) to get a token :class:`~trl_envs.core.types.Env` whose observations extend each other
    token-exactly.
    """

    @abstractmethod
    async def initial_messages(self) -> list[Message]:
        """The conversation the model answers first (system and user messages)."""

    @abstractmethod
    async def step(self, response: ParsedResponse) -> MessageStepResult:
        """React to the model's parsed response.

        ``response.message`` is the assistant message; ``response.end`` says whether it ended properly
        (``"malformed"`` means it was cut by a token budget).
        """


class MessageTokenEnv(Env):
    """Adapts a :class:`MessageEnv` to the token-level :class:`~trl_envs.core.types.Env` contract.

    Each next observation is ``previous observation + action tokens + rendered new messages`` (see
    :meth:`Renderer.extend_observation`), so a whole episode is one token sequence.
    """

    def __init__(self, message_env: MessageEnv, renderer: Renderer):
        self.message_env = message_env
        self.renderer = renderer
        self._ob: Observation | None = None

    @property
    def unwrapped(self) -> MessageEnv:
        """The :class:`MessageEnv` this env adapts (see :attr:`Env.unwrapped <trl_envs.core.types.Env.unwrapped>`)."""
        return self.message_env

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        messages = await self.message_env.initial_messages()
        self._ob = self.renderer.build_generation_prompt(messages)
        return self._ob, self.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: dict[str, Any] | None = None) -> StepResult:
        if self._ob is None:
            raise RuntimeError(f"{type(self.message_env).__name__}: step() called before initial_observation()")
        result = await self.message_env.step(self.renderer.parse_response(action))
        if not isinstance(result, MessageStepResult):
            raise EnvContractError(  # not retried by RetryOnFailure: a broken env is a bug, not bad luck
                f"{type(self.message_env).__name__}.step must return a MessageStepResult, got {type(result).__name__}"
            )
        if result.episode_done:
            next_ob = list(self._ob) + list(action)
        else:
            if not result.next_messages:
                raise EnvContractError(
                    f"{type(self.message_env).__name__}.step returned episode_done=False with no next_messages; "
                    "the model would have nothing new to answer."
                )
            next_ob = self.renderer.extend_observation(self._ob, action, result.next_messages)
        self._ob = next_ob
        return StepResult(
            reward=result.reward,
            episode_done=result.episode_done,
            next_observation=next_ob,
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics=result.metrics,
            logs=result.logs,
        )
