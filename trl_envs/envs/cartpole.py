"""``cartpole``: Gymnasium's ``CartPole-v1`` played in text. Each turn the model sees the current state and replies
``0``/``left`` (push the cart left) or ``1``/``right``; +1 per step the pole stays up, at most 500 steps.

The state is shown with explicit signs and the side each sign means (:func:`cartpole_text`), because the decision
that balances the pole is a matter of signs: pushing toward where the pole is falling (the sign of angle + angular
velocity, :func:`lean_policy`) already averages about 480 of 500 over seeds 0-9. Episodes are played in
``current_state`` mode by default: short prompts, one training row per turn.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.builtin_datasets import check_int_option
from ..core.renderer import Renderer
from ..gym.env import GymDatasetBuilder, GymGroupBuilder

ENV_ID = "CartPole-v1"
ACTION_NAMES = ("left", "right")
INSTRUCTIONS = "Keep the pole up. Reply 0 to push the cart left, 1 to push it right."

_FIELD = re.compile(r"pole angle ([-+]\d+\.\d+).*?pole turning ([-+]\d+\.\d+)", re.S)


def _side(text: str) -> str:
    value = float(text)
    return "right" if value > 0 else "left" if value < 0 else "upright"


def cartpole_text(observation: Any, info: dict | None = None) -> str:
    """The CartPole state as the model sees it, e.g.::

    Keep the pole up. Reply 0 to push the cart left, 1 to push it right.
    pole angle +0.03 (right), pole turning -0.12 (left), cart +0.01, cart speed +0.20
    """
    x, speed, angle, turning = (float(v) for v in observation)
    angle_s, turning_s = f"{angle:+.2f}".replace("-0.00", "+0.00"), f"{turning:+.2f}".replace("-0.00", "+0.00")
    return (
        f"{INSTRUCTIONS}\npole angle {angle_s} ({_side(angle_s)}), pole turning {turning_s} ({_side(turning_s)}), "
        f"cart {x:+.2f}, cart speed {speed:+.2f}"
    )


def lean_policy(prompt: str) -> str:
    """The scripted baseline "push toward where the pole is falling", reading the last state in ``prompt`` (text as
    made by :func:`cartpole_text`): ``"1"`` if angle + angular velocity > 0 else ``"0"``."""
    matches = _FIELD.findall(prompt)
    if not matches:
        raise ValueError(f"lean_policy: no CartPole state in the prompt {prompt[-200:]!r}")
    angle, turning = (float(v) for v in matches[-1])
    return "1" if angle + turning > 0 else "0"


def CartPoleDatasetBuilder(
    renderer: Renderer,
    group_size: int = 4,
    batch_size: int = 2,
    num_batches: int = 1000,
    num_test_batches: int = 1,
    seed: int = 0,
    test_seed: int = 0,
    **env_kwargs: Any,
) -> GymDatasetBuilder:
    """Gymnasium CartPole-v1 in text: the current state each turn, reply 0 (push left) or 1 (push right); +1 per step.

    Train/test datasets of ``CartPole-v1`` episodes: groups of ``group_size`` episodes with one seed each.

    ``env_kwargs`` are :class:`~trl_envs.gym.env.GymEnv` options; defaults here: ``formatter=cartpole_text``,
    ``action_names=("left", "right")`` (so ``0``/``1`` and ``left``/``right`` are both read), ``mode="current_state"``,
    an unparsable reply costs ``-0.1`` and pushes left (action 0). Set ``max_episode_steps`` to cap episodes below
    500 (cheaper on a CPU, but returns above the cap cannot be seen).

    Why these two: with a random push for an illegal reply, a random policy beats a small model's first choices, so
    it learns to reply garbage; with a penalty of -1 it learns legal replies first and collapses onto one action
    before it learns to read the state. A fixed push and a small penalty leave the state as the only thing worth
    learning (runs: bench/results/history.md, CartPole).
    """
    for option, value, minimum in (
        ("group_size", group_size, 1),
        ("batch_size", batch_size, 1),
        ("num_batches", num_batches, 1),
        ("num_test_batches", num_test_batches, 0),
        ("seed", seed, None),
    ):
        check_int_option("cartpole", option, value, minimum)
    if env_kwargs.get("max_episode_steps") is not None:
        check_int_option("cartpole", "max_episode_steps", env_kwargs["max_episode_steps"], 1)
    return GymDatasetBuilder(
        ENV_ID,
        renderer,
        batch_size=batch_size,
        group_size=group_size,
        num_batches=num_batches,
        num_test_batches=num_test_batches,
        seed=seed,
        test_seed=test_seed,
        tags=["cartpole"],
        env_kwargs=_options(env_kwargs),
    )


def _options(env_kwargs: dict[str, Any]) -> dict[str, Any]:
    return (
        dict(
            formatter=cartpole_text,
            action_names=ACTION_NAMES,
            mode="current_state",
            invalid_action="default",
            invalid_action_penalty=-0.1,
            default_action=0,
        )
        | env_kwargs
    )


def cartpole_from_row(
    renderer: Renderer, group_size: int, *, seed: int, max_episode_steps: int | None = None
) -> GymGroupBuilder:
    """The group of one row spec, ``{"env": "cartpole", "seed": 3}``: ``group_size`` episodes reset with ``seed``
    (``max_episode_steps`` caps them below CartPole-v1's 500)."""
    if max_episode_steps is not None and max_episode_steps < 1:
        raise ValueError(f"max_episode_steps must be >= 1, got {max_episode_steps}")
    return GymGroupBuilder(
        ENV_ID, renderer, seed, group_size, ["cartpole"], **_options({"max_episode_steps": max_episode_steps})
    )


CartPoleDatasetBuilder.from_row = cartpole_from_row  # rows: docs/envs_as_datasets.md
