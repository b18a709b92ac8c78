"""One SkyRL-Gym episode as a :class:`~trl_envs.core.message_env.MessageEnv`, and a group of them.

SkyRL-Gym (the env library of NovaSky's SkyRL) makes an env per dataset row: ``skyrl_gym.make(env_id,
env_config=..., extras=row)``, where the row is SkyRL's dataset format -- ``prompt`` (chat messages), ``env_class``,
``reward_spec`` (``ground_truth`` ...), ``extra_info`` and any other field the env reads. The episode is SkyRL's own
loop: ``init(prompt)`` gives the first messages, each reply goes to ``step`` as text, whose ``observations`` are the
next messages (a tool result, a follow-up question), ``reward`` the step's reward and ``done`` the end. The episode's
reward is the sum of its steps' rewards; ``get_metrics()`` is logged at the end. ``step`` runs in a worker thread
(some envs execute code or query a service).

skyrl_gym is imported when an episode starts, never by ``import trl_envs``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.message_env import MessageEnv, MessageStepResult, MessageTokenEnv
from ..core.renderer import Message, ParsedResponse, Renderer
from ..core.types import Env, EnvGroupBuilder

PREFIX = "skyrl_gym/"
ROW_FIELDS_NOT_EXTRAS = ("prompt", "env_class")
"""Row fields SkyRL does not pass to the env as ``extras``."""


def import_skyrl_gym():
    try:
        import skyrl_gym
    except ImportError as e:
        raise ImportError("SkyRL-Gym envs need skyrl_gym: pip install 'trl-envs[skyrl-gym]' (docs/ecosystem.md)") from e
    return skyrl_gym


def env_ids() -> list[str]:
    """Every env id SkyRL-Gym registers, sorted."""
    return sorted(import_skyrl_gym().registry)


def check_row(name: str, row: Mapping[str, Any], where: str) -> None:
    """``ValueError`` naming env ``name`` and the row (``where``) for a row SkyRL-Gym cannot play."""
    prompt = row.get("prompt")
    if not isinstance(prompt, list) or not prompt or not all(isinstance(m, Mapping) for m in prompt):
        raise ValueError(f"env {name!r}: {where}: 'prompt' must be a non-empty list of chat messages, got {prompt!r}")
    env_class = row.get("env_class")
    if env_class is not None and env_class != name[len(PREFIX) :]:
        raise ValueError(f"env {name!r}: {where} is for env_class {env_class!r}; train it as '{PREFIX}{env_class}'")


class SkyRLGymEnv(MessageEnv):
    """One episode of SkyRL-Gym env ``env_id`` on ``row`` (SkyRL's dataset format; see the module docstring).

    Args:
        env_id: a SkyRL-Gym id (``gsm8k``, ``gsm8k_multi_turn``, ``aime``, ...).
        row: the dataset row: ``prompt`` plus what the env reads (``reward_spec``, ``extra_info``, ...).
        env_config: the env's ``env_config`` (SkyRL's ``environment.skyrl_gym.<env>`` section), as a mapping.
    """

    def __init__(self, env_id: str, row: Mapping[str, Any], env_config: Mapping[str, Any] | None = None):
        self.env_id, self.row, self.env_config = env_id, dict(row), dict(env_config or {})
        self.env: Any = None

    async def initial_messages(self) -> list[Message]:
        skyrl_gym = import_skyrl_gym()
        from omegaconf import OmegaConf  # a dependency of skyrl-gym; its envs read env_config attributes

        extras = {k: v for k, v in self.row.items() if k not in ROW_FIELDS_NOT_EXTRAS}
        try:
            self.env = skyrl_gym.make(self.env_id, env_config=OmegaConf.create(self.env_config), extras=extras)
        except (AssertionError, KeyError) as e:  # how SkyRL-Gym envs refuse a row
            raise ValueError(
                f"env '{PREFIX}{self.env_id}': SkyRL-Gym refused the row ({type(e).__name__}: {e}); its fields: "
                f"{sorted(self.row)}"
            ) from e
        messages, _ = self.env.init([dict(m) for m in self.row["prompt"]])
        return [dict(m) for m in messages]  # type: ignore[misc]

    async def step(self, response: ParsedResponse) -> MessageStepResult:
        if self.env is None:
            raise RuntimeError(f"SkyRLGymEnv({self.env_id}): step() before initial_messages()")
        text = response.message["content"]
        out = await asyncio.to_thread(self.env.step, text if isinstance(text, str) else str(text))
        done = bool(out["done"])
        metrics: dict[str, float] = {}
        if done:
            metrics = {k: float(v) for k, v in (self.env.get_metrics() or {}).items() if _is_number(v)}
            self.env.close()
        logs = {"metadata": out["metadata"]} if out.get("metadata") else {}
        next_messages = [dict(m) for m in out.get("observations") or []]
        return MessageStepResult(float(out["reward"]), done, next_messages, metrics, logs)  # type: ignore[arg-type]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class SkyRLGymGroupBuilder(EnvGroupBuilder):
    """``group_size`` episodes of SkyRL-Gym env ``env_id`` on the same ``row`` (a GRPO group)."""

    def __init__(
        self,
        renderer: Renderer,
        env_id: str,
        row: Mapping[str, Any],
        group_size: int,
        env_config: Mapping[str, Any] | None = None,
    ):
        self.renderer, self.env_id, self.row, self.group_size = renderer, env_id, dict(row), group_size
        self.env_config = dict(env_config or {})

    async def make_envs(self) -> Sequence[Env]:
        return [
            MessageTokenEnv(SkyRLGymEnv(self.env_id, self.row, self.env_config), self.renderer)
            for _ in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return [PREFIX + self.env_id]
