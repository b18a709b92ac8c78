"""An OpenEnv server's episodes as trl_envs envs: one :class:`OpenEnvEnv` per episode, one server session each.

* ``reset`` -> the first observation, as a user message (after an optional system prompt);
* the model's reply -> an action through :class:`~trl_envs.openenv.mapping.TextMapping`;
* ``step`` -> the step's reward (``None`` counts as 0), ``done``, and the next observation as the next user message
  (token-exact multi-turn: :class:`~trl_envs.core.message_env.MessageTokenEnv`).

The envs of a GRPO group reset with the same seed (the group's), so they start from the same state when the server's
env honours ``seed``. Each episode opens its session when it starts and closes it as soon as it ends; the builder's
``cleanup`` closes whatever an error, a timeout or a cancellation left open.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from ..core.message_env import MessageEnv, MessageStepResult, MessageTokenEnv
from ..core.renderer import Message, ParsedResponse, Renderer
from ..core.types import Env, EnvGroupBuilder
from .mapping import TextMapping
from .pool import acquire_slot
from .session import (
    DEFAULT_MESSAGE_TIMEOUT_S,
    DEFAULT_RECONNECT_TIMEOUT_S,
    OpenEnvActionError,
    OpenEnvError,
    OpenEnvSession,
)


class OpenEnvEnv(MessageEnv):
    """One episode of the OpenEnv env served at ``url``.

    Args:
        url: the server's base URL.
        mapping: text <-> action/observation (:class:`~trl_envs.openenv.mapping.TextMapping`).
        reset_kwargs: passed to the server's ``reset`` (``seed`` among them for seeded episodes).
        system_prompt: a system message before the first observation (``None``: none).
        max_sessions: at most this many sessions open at once against ``url`` from this process (episodes beyond it
            wait); ``None``: no client-side limit.
        message_timeout_s: longest wait for one reply of the server.
        reconnect_timeout_s: how long opening the episode's session keeps trying, with backoff, while the server is
            unreachable (a restart); then :class:`~trl_envs.openenv.session.OpenEnvServerGone` stops the run.
        rejected_action_reward: ``None`` (default): an action the env rejects raises
            :class:`~trl_envs.openenv.session.OpenEnvActionError`; a number: the episode ends there with that reward
            (metric ``action_rejected`` = 1), a training signal like an illegal move.
    """

    def __init__(
        self,
        url: str,
        mapping: TextMapping,
        *,
        reset_kwargs: dict[str, Any] | None = None,
        system_prompt: str | None = None,
        max_sessions: int | None = None,
        message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S,
        reconnect_timeout_s: float = DEFAULT_RECONNECT_TIMEOUT_S,
        rejected_action_reward: float | None = None,
    ):
        self.url, self.mapping = url, mapping
        self.reset_kwargs = dict(reset_kwargs or {})
        self.system_prompt, self.max_sessions = system_prompt, max_sessions
        self.message_timeout_s, self.rejected_action_reward = message_timeout_s, rejected_action_reward
        self.reconnect_timeout_s = reconnect_timeout_s
        self.session: OpenEnvSession | None = None
        self._release: Callable[[], None] | None = None

    async def initial_messages(self) -> list[Message]:
        self._release = await acquire_slot(self.url, self.max_sessions)
        self.session = OpenEnvSession(
            self.url, message_timeout_s=self.message_timeout_s, reconnect_timeout_s=self.reconnect_timeout_s
        )
        result = await self.session.reset(**self.reset_kwargs)
        if result.done:
            await self.close()
            raise OpenEnvError(
                f"OpenEnv server at {self.url}: reset({self.reset_kwargs}) returned an episode that is "
                "already done; there is nothing for the model to answer"
            )
        messages: list[Message] = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return messages + [{"role": "user", "content": self.mapping.observation_text(result.observation)}]

    async def step(self, response: ParsedResponse) -> MessageStepResult:
        if self.session is None:
            raise RuntimeError(f"OpenEnvEnv({self.url}): step() before initial_messages()")
        text = response.message["content"]
        action = self.mapping.action(text if isinstance(text, str) else json.dumps(text))
        try:
            result = await self.session.step(action)
        except OpenEnvActionError as e:
            if self.rejected_action_reward is None:
                raise
            await self.close()
            return MessageStepResult(
                float(self.rejected_action_reward), True, [], {"action_rejected": 1.0}, {"rejected": str(e)}
            )
        reward = float(result.reward) if result.reward is not None else 0.0
        logs = {"metadata": result.metadata} if result.metadata else {}
        if result.done:
            await self.close()
            return MessageStepResult(reward, True, [], {"action_rejected": 0.0}, logs)
        next_message: Message = {"role": "user", "content": self.mapping.observation_text(result.observation)}
        return MessageStepResult(reward, False, [next_message], {"action_rejected": 0.0}, logs)

    async def close(self) -> None:
        """Close the session (if open) and give its slot back. Idempotent."""
        try:
            if self.session is not None:
                await self.session.close()
        finally:
            if self._release is not None:
                self._release()


class OpenEnvGroupBuilder(EnvGroupBuilder):
    """``group_size`` episodes of the server at ``url``, reset with ``seed`` (``None``: unseeded) plus
    ``reset_kwargs``. ``env_options`` are :class:`OpenEnvEnv`'s keyword options. Also the row spec of env
    ``openenv``: see :func:`openenv_from_row`."""

    def __init__(
        self,
        url: str,
        renderer: Renderer,
        group_size: int,
        mapping: TextMapping,
        *,
        seed: int | None = None,
        reset_kwargs: dict[str, Any] | None = None,
        tags: Sequence[str] = ("openenv",),
        **env_options: Any,
    ):
        if group_size < 1:
            raise ValueError(f"OpenEnvGroupBuilder({url}): group_size must be >= 1, got {group_size}")
        self.url, self.renderer, self.group_size, self.mapping = url, renderer, group_size, mapping
        self.seed, self.reset_kwargs, self.tags, self.env_options = (
            seed,
            dict(reset_kwargs or {}),
            list(tags),
            env_options,
        )
        self._envs: list[OpenEnvEnv] = []

    async def make_envs(self) -> Sequence[Env]:
        reset_kwargs = self.reset_kwargs if self.seed is None else {"seed": self.seed, **self.reset_kwargs}
        envs = [
            OpenEnvEnv(self.url, self.mapping, reset_kwargs=reset_kwargs, **self.env_options)
            for _ in range(self.group_size)
        ]
        self._envs.extend(envs)
        return [MessageTokenEnv(env, self.renderer) for env in envs]

    async def cleanup(self) -> None:
        envs, self._envs = self._envs, []
        results = await asyncio.gather(*(env.close() for env in envs), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    def logging_tags(self) -> list[str]:
        return list(self.tags)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _envs=[])  # live sessions do not travel
