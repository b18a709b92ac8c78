"""``textarena/<env id>`` names (e.g. ``textarena/TicTacToe-v0``) as env kinds of the registry.

A name trains by name with ``--env_kwargs`` (the options of :class:`TextArenaDatasetBuilder`: ``num_players``
(default: the game's own, the first of :data:`~trl_envs.textarena.game.PLAYER_COUNTS` it accepts), ``opponent``,
``test_opponent``, ``seat``, ``make_kwargs`` for ``textarena.make``, ...) and from rows
``{"env": "textarena/TicTacToe-v0", "seed": 3}`` (one group: self-play unless the row names an ``opponent``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..core.renderer import Renderer
from ..multiplayer.group import (
    GameDatasetBuilder,
    GameGroupBuilder,
    check_make_kwargs,
    game_group_from_row,
    game_kind_factory,
    probe_game,
)
from ..registry.names import EnvKind, unknown_prefixed_name
from .catalog import listing
from .game import TextArenaGameFactory, import_textarena

PREFIX = "textarena/"
LISTED_VARIANT_SUFFIXES = ("-raw", "-train")
"""Registered variants left out of ``trl-envs list`` (they still resolve by name)."""


def _registry() -> dict[str, Any]:
    import_textarena()
    from textarena.envs.registration import ENV_REGISTRY

    return ENV_REGISTRY


@dataclass
class TextArenaDatasetBuilder(GameDatasetBuilder):
    """A TextArena game: self-play groups for training (or against ``opponent``), a test set against
    ``test_opponent``; ``make_kwargs`` go to ``textarena.make``."""

    env_name: ClassVar[str] = "textarena"

    num_players: int | None = None  # type: ignore[assignment]  # default: the game's own (PLAYER_COUNTS)
    make_kwargs: dict[str, Any] = field(default_factory=dict)
    env_id: str = field(default="TicTacToe-v0", kw_only=True)

    def check_options(self) -> None:
        self.env_name = self.name
        check_make_kwargs(self.name, self.make_kwargs)
        if self.num_players is not None and (
            isinstance(self.num_players, bool) or not isinstance(self.num_players, int) or self.num_players < 1
        ):
            raise ValueError(
                f"env {self.name!r}: option 'num_players' must be an integer >= 1, got {self.num_players!r}"
            )
        self.num_players = probe_game(self.game_factory()).num_players  # a game that cannot start fails here
        super().check_options()

    def game_factory(self) -> Callable[[int], Any]:
        return TextArenaGameFactory(self.env_id, self.num_players, dict(self.make_kwargs))


def env_kind(name: str) -> EnvKind:
    """The kind of ``textarena/<env id>``; :class:`~trl_envs.registry.names.UnknownEnvError` with the closest ids for
    an unregistered one."""
    env_id = name[len(PREFIX) :]
    registry = _registry()
    if env_id not in registry:
        raise unknown_prefixed_name(name, "textarena", sorted(PREFIX + i for i in registry))

    factory = game_kind_factory(TextArenaDatasetBuilder, name, env_id=env_id)

    def from_row(
        renderer: Renderer,
        group_size: int,
        *,
        seed: int = 0,
        num_players: int | None = None,
        opponent: str | None = None,
        seat: int | None = None,
        make_kwargs: dict | None = None,
        move_timeout: float = 120.0,
        invalid_reply_penalty: float = 0.0,
    ) -> GameGroupBuilder:
        """One group of the game, started from ``seed``."""
        return game_group_from_row(
            name,
            lambda options: TextArenaGameFactory(env_id, num_players, options),
            renderer,
            group_size,
            seed=seed,
            opponent=opponent,
            seat=seat,
            make_kwargs=make_kwargs,
            move_timeout=move_timeout,
            invalid_reply_penalty=invalid_reply_penalty,
        )

    description = f"TextArena {env_id}: n-player game, self-play (one env per player)"
    factory.__doc__ = description
    return EnvKind(name, description, factory, from_row, "textarena")


def env_names() -> dict[str, str]:
    """The registered TextArena ids that train by name (:mod:`~trl_envs.textarena.catalog`; not the ``-raw`` /
    ``-train`` variants), as ``textarena/<id>``."""
    ids = [i for i in sorted(_registry()) if not i.endswith(LISTED_VARIANT_SUFFIXES)]
    return {PREFIX + i: description for i, description in listing(ids).items()}
