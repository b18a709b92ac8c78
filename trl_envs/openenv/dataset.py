"""Env ``openenv`` by name: train and test datasets of an OpenEnv server's episodes, and its row spec.

    python scripts/train_grpo.py --env openenv --env_kwargs '{"url": "http://127.0.0.1:8000"}'
    trl-envs eval --env openenv --env_kwargs '{"url": "http://127.0.0.1:8000"}'
    rows: {"env": "openenv", "url": "http://127.0.0.1:8000", "seed": 3}

Nothing here imports ``openenv`` (the package): it is imported when the first session opens, or when a server is
started from an image or Space.
"""

from __future__ import annotations

import atexit
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.renderer import Renderer
from ..core.types import TEST_SEED_OFFSET, EnvGroupBuilder, RLDataset, RLDatasetBuilder
from .env import OpenEnvGroupBuilder
from .mapping import ActionFn, ObservationFn, TextMapping
from .session import DEFAULT_MESSAGE_TIMEOUT_S, DEFAULT_RECONNECT_TIMEOUT_S, INSTALL

ENV_NAME = "openenv"


class OpenEnvDataset(RLDataset):
    """``num_batches`` batches of ``batch_size`` :class:`~trl_envs.openenv.env.OpenEnvGroupBuilder` s; group ``j`` of
    batch ``i`` resets with seed ``seed + i * batch_size + j``."""

    def __init__(
        self,
        url: str,
        renderer: Renderer,
        mapping: TextMapping,
        *,
        batch_size: int,
        group_size: int,
        num_batches: int,
        seed: int,
        **group_options: Any,
    ):
        self.url, self.renderer, self.mapping = url, renderer, mapping
        self.batch_size, self.group_size, self.num_batches, self.seed = batch_size, group_size, num_batches, seed
        self.group_options = group_options

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < self.num_batches:
            raise IndexError(f"OpenEnvDataset({self.url}): batch {index} out of range (0..{self.num_batches - 1})")
        first = self.seed + index * self.batch_size
        return [
            OpenEnvGroupBuilder(
                self.url, self.renderer, self.group_size, self.mapping, seed=first + j, **self.group_options
            )
            for j in range(self.batch_size)
        ]

    def __len__(self) -> int:
        return self.num_batches


@dataclass
class OpenEnvDatasetBuilder(RLDatasetBuilder):
    """An OpenEnv server (URL, Docker image or Hugging Face Space): its episodes, observation -> user message,
    reply -> action.

    Give exactly one of ``url`` (a running server), ``image`` (a Docker image, started with OpenEnv's
    ``LocalDockerProvider``) or ``space`` (a Hugging Face Space id, its image run the same way); a started container
    is stopped at interpreter exit. Training episodes are seeded from ``seed``, test episodes from ``test_seed +
    TEST_SEED_OFFSET``. The server's schema is read when the builder is made, so a wrong URL or an action type the
    text cannot go into fails at once.

    Options (``--env_kwargs``): ``action_field`` / ``observation_field`` (:mod:`trl_envs.openenv.mapping`; Python:
    ``action_fn`` / ``observation_fn``), ``system_prompt``, ``reset_kwargs`` (extra arguments of the server's
    ``reset``, e.g. a task name), ``max_sessions`` (sessions open at once per server from this process; the others
    wait), ``message_timeout_s``, ``reconnect_timeout_s`` (how long a new episode waits, retrying with backoff, for an
    unreachable server to come back before the run stops, default 60), ``rejected_action_reward`` (``None``: a
    rejected action is an error; a number: the episode ends with it), ``tag`` (the metrics' logging tag).
    """

    renderer: Renderer
    url: str | None = None
    image: str | None = None
    space: str | None = None
    batch_size: int = 4
    group_size: int = 4
    num_batches: int = 1000
    num_test_batches: int = 1
    seed: int = 0
    test_seed: int = 0
    action_field: str | None = None
    observation_field: str | None = None
    action_fn: ActionFn | None = None
    observation_fn: ObservationFn | None = None
    system_prompt: str | None = None
    reset_kwargs: dict[str, Any] = field(default_factory=dict)
    max_sessions: int | None = None
    message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S
    reconnect_timeout_s: float = DEFAULT_RECONNECT_TIMEOUT_S
    rejected_action_reward: float | None = None
    tag: str = ENV_NAME

    def __post_init__(self) -> None:
        self.check_options()
        if self.url is None:
            self.url = start_server(self.image, self.space)
        self.mapping = TextMapping.for_server(
            self.url,
            action_field=self.action_field,
            observation_field=self.observation_field,
            action_fn=self.action_fn,
            observation_fn=self.observation_fn,
        )

    def check_options(self) -> None:
        """Raise a ``ValueError`` naming the option for a bad value (before any connection is made)."""
        sources = {k: v for k, v in (("url", self.url), ("image", self.image), ("space", self.space)) if v is not None}
        if len(sources) != 1:
            raise ValueError(
                f"env {ENV_NAME!r}: give exactly one of the options url (a running server, e.g. "
                f"'http://127.0.0.1:8000'), image (a Docker image) or space (a Hugging Face Space id); "
                f"got {sorted(sources) or 'none'}"
            )
        for name, value in sources.items():
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"env {ENV_NAME!r}: option {name!r} must be a non-empty string, got {value!r}")
        if self.url is not None and not self.url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ValueError(
                f"env {ENV_NAME!r}: option 'url' must start with http://, https://, ws:// or wss://, got {self.url!r}"
            )
        for name, minimum in (
            ("batch_size", 1),
            ("group_size", 1),
            ("num_batches", 1),
            ("num_test_batches", 0),
            ("seed", 0),
            ("test_seed", 0),
        ):
            _check_int(name, getattr(self, name), minimum)
        if self.max_sessions is not None:
            _check_int("max_sessions", self.max_sessions, 1)
        _check_number("message_timeout_s", self.message_timeout_s, positive=True)
        _check_number("reconnect_timeout_s", self.reconnect_timeout_s)
        if self.reconnect_timeout_s < 0:
            raise ValueError(
                f"env {ENV_NAME!r}: option 'reconnect_timeout_s' must be >= 0 seconds, got {self.reconnect_timeout_s!r}"
            )
        if self.rejected_action_reward is not None:
            _check_number("rejected_action_reward", self.rejected_action_reward)
        for name in ("action_field", "observation_field", "system_prompt", "tag"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"env {ENV_NAME!r}: option {name!r} must be a string, got {value!r}")
        if not isinstance(self.reset_kwargs, dict):
            raise ValueError(
                f"env {ENV_NAME!r}: option 'reset_kwargs' must be a JSON object (dict), got {self.reset_kwargs!r}"
            )
        for name in ("action_fn", "observation_fn"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise ValueError(f"env {ENV_NAME!r}: option {name!r} must be a function")
        if self.action_fn is not None and self.action_field is not None:
            raise ValueError(f"env {ENV_NAME!r}: give action_field or action_fn, not both")
        train = range(self.seed, self.seed + self.num_batches * self.batch_size)
        test_start = self.test_seed + TEST_SEED_OFFSET
        if (
            self.num_test_batches
            and train.start < test_start + self.num_test_batches * self.batch_size
            and test_start < train.stop
        ):
            raise ValueError(
                f"env {ENV_NAME!r}: training episode seeds {train.start}..{train.stop - 1} reach the test "
                f"episode seeds from {test_start}; use a smaller seed or fewer batches"
            )

    def group_options(self) -> dict[str, Any]:
        """The options every group of this builder gets (besides its seed)."""
        return dict(
            reset_kwargs=self.reset_kwargs,
            tags=[self.tag],
            system_prompt=self.system_prompt,
            max_sessions=self.max_sessions,
            message_timeout_s=self.message_timeout_s,
            reconnect_timeout_s=self.reconnect_timeout_s,
            rejected_action_reward=self.rejected_action_reward,
        )

    def dataset(self, num_batches: int, seed: int) -> OpenEnvDataset:
        assert self.url is not None
        return OpenEnvDataset(
            self.url,
            self.renderer,
            self.mapping,
            batch_size=self.batch_size,
            group_size=self.group_size,
            num_batches=num_batches,
            seed=seed,
            **self.group_options(),
        )

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        test = self.dataset(self.num_test_batches, self.test_seed + TEST_SEED_OFFSET) if self.num_test_batches else None
        return self.dataset(self.num_batches, self.seed), test


def openenv_from_row(
    renderer: Renderer,
    group_size: int,
    *,
    url: str,
    seed: int | None = None,
    reset_kwargs: dict | None = None,
    action_field: str | None = None,
    observation_field: str | None = None,
    system_prompt: str | None = None,
    max_sessions: int | None = None,
    rejected_action_reward: float | None = None,
) -> OpenEnvGroupBuilder:
    """The group of one row spec, ``{"env": "openenv", "url": "http://127.0.0.1:8000", "seed": 3}``: ``group_size``
    episodes of the server at ``url``, reset with ``seed`` and ``reset_kwargs`` (a task, a level...)."""
    builder = OpenEnvDatasetBuilder(
        renderer,
        url=url,
        group_size=group_size,
        num_test_batches=0,
        action_field=action_field,
        observation_field=observation_field,
        system_prompt=system_prompt,
        reset_kwargs=reset_kwargs or {},
        max_sessions=max_sessions,
        rejected_action_reward=rejected_action_reward,
    )
    if seed is not None:
        _check_int("seed", seed, 0)
    return OpenEnvGroupBuilder(url, renderer, group_size, builder.mapping, seed=seed, **builder.group_options())


OpenEnvDatasetBuilder.from_row = openenv_from_row  # rows: docs/envs_as_datasets.md


def start_server(image: str | None, space: str | None, timeout_s: float = 120.0) -> str:
    """Start the env's server from a Docker ``image`` or a Hugging Face ``space`` (its image,
    ``registry.hf.space/<space>``) with OpenEnv's ``LocalDockerProvider``; return its URL. The container is stopped at
    interpreter exit. Needs Docker (and, for a Space, access to the Hub)."""
    try:
        from openenv.core.containers.runtime import LocalDockerProvider
        from openenv.core.utils import hf_space_subdomain
    except ModuleNotFoundError as e:
        raise ImportError(f"{INSTALL}\n({e})") from e
    if image is None:
        assert space is not None
        image = f"registry.hf.space/{hf_space_subdomain(space)}:latest"
    provider = LocalDockerProvider()
    url = provider.start_container(image)
    atexit.register(provider.stop_container)
    provider.wait_for_ready(url, timeout_s=timeout_s)
    return url


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"env {ENV_NAME!r}: option {name!r} must be an integer >= {minimum}, got {value!r}")


def _check_number(name: str, value: Any, *, positive: bool = False) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or (positive and value <= 0)
    ):
        raise ValueError(
            f"env {ENV_NAME!r}: option {name!r} must be a finite number{' > 0' if positive else ''}, got {value!r}"
        )
