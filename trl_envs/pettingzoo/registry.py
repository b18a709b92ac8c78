"""``pettingzoo/<family>/<module>`` names (e.g. ``pettingzoo/classic/tictactoe_v3``) as env kinds of the registry.

A name trains by name with ``--env_kwargs`` (the options of :class:`PettingZooDatasetBuilder`: ``api``,
``formatter`` (a name of :data:`~trl_envs.pettingzoo.text.FORMATTERS` or ``"package.module:function"``),
``make_kwargs``, ``opponent``, ``test_opponent``, ``seat``, ``illegal_reward``, ...) and from rows
``{"env": "pettingzoo/classic/tictactoe_v3", "seed": 3}`` (one group: self-play unless the row names an
``opponent``). The number of players is the game's (``possible_agents``).
"""

from __future__ import annotations

import importlib.util
import pkgutil
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
from .game import PettingZooGameFactory, missing_package
from .text import FORMATTERS

PREFIX = "pettingzoo/"
LISTED_FAMILIES = ("classic",)
"""Families listed by ``trl-envs list`` (turn-based games that read as text); any other family resolves by name."""


@dataclass
class PettingZooDatasetBuilder(GameDatasetBuilder):
    """A PettingZoo game: self-play groups for training (or against ``opponent``), a test set against
    ``test_opponent``; ``make_kwargs`` go to the game's ``env`` / ``parallel_env``."""

    env_name: ClassVar[str] = "pettingzoo"

    make_kwargs: dict[str, Any] = field(default_factory=dict)
    api: str = "aec"
    illegal_reward: float = -1.0
    formatter: str | None = None
    game: str = field(default="classic/tictactoe_v3", kw_only=True)

    def check_options(self) -> None:
        if self.api not in ("aec", "parallel"):
            raise ValueError(f"env {self.name!r}: option 'api' must be 'aec' or 'parallel', got {self.api!r}")
        check_make_kwargs(self.name, self.make_kwargs)
        probe = probe_game(self.game_factory())  # a game that cannot start fails here, before any model is loaded
        if self.num_players != probe.num_players:
            if self.num_players != GameDatasetBuilder.num_players:
                raise ValueError(
                    f"env {self.name!r}: option 'num_players' is {self.num_players} but the game has "
                    f"{probe.num_players} agents ({probe.agents}); leave it out"
                )
            self.num_players = probe.num_players
        super().check_options()

    def game_factory(self) -> Callable[[int], Any]:
        return PettingZooGameFactory(
            self.game,
            dict(self.make_kwargs),
            self.api,  # type: ignore[arg-type]
            self.illegal_reward,
            self.formatter,
        )


def _game_of(name: str) -> str:
    return name[len(PREFIX) :]


def env_kind(name: str) -> EnvKind:
    """The kind of ``pettingzoo/<family>/<module>``; :class:`~trl_envs.registry.names.UnknownEnvError` with the
    closest listed names for one PettingZoo does not have."""
    game = _game_of(name)
    family, _, module = game.partition("/")
    found = bool(family and module and "/" not in module and not module.startswith("_"))
    try:
        found = found and importlib.util.find_spec(f"pettingzoo.{family}.{module}") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise unknown_prefixed_name(name, "pettingzoo", sorted(env_names()))

    factory = game_kind_factory(PettingZooDatasetBuilder, name, game=game)

    def from_row(
        renderer: Renderer,
        group_size: int,
        *,
        seed: int = 0,
        api: str = "aec",
        opponent: str | None = None,
        seat: int | None = None,
        make_kwargs: dict | None = None,
        illegal_reward: float = -1.0,
        move_timeout: float = 120.0,
        invalid_reply_penalty: float = 0.0,
        formatter: str | None = None,
    ) -> GameGroupBuilder:
        """One group of the game, started from ``seed``; ``formatter`` by name only (a row imports no code)."""
        if formatter is not None and formatter not in FORMATTERS:
            raise ValueError(
                f"env {name!r}: a row's 'formatter' must be one of {sorted(FORMATTERS)}, got {formatter!r}"
            )
        return game_group_from_row(
            name,
            lambda options: PettingZooGameFactory(game, options, api, illegal_reward, formatter),  # type: ignore[arg-type]
            renderer,
            group_size,
            seed=seed,
            opponent=opponent,
            seat=seat,
            make_kwargs=make_kwargs,
            move_timeout=move_timeout,
            invalid_reply_penalty=invalid_reply_penalty,
        )

    description = f"PettingZoo {game}: n-player game, self-play (one env per agent)"
    factory.__doc__ = description
    return EnvKind(name, description, factory, from_row, "pettingzoo")


NOT_LISTED: dict[str, str] = {
    "classic/chess_v6": "observations of 7,104 numbers and no text formatter",
    "classic/hanabi_v5": "needs OpenSpiel through shimmy, and has no text formatter",
    "classic/texas_holdem_v4": "observations of 72 numbers and no text formatter",
}
"""Games of :data:`LISTED_FAMILIES` left out of ``trl-envs list`` -> why (they still resolve by name: with a
``formatter`` of your own they train)."""


def env_names() -> dict[str, str]:
    """The games of :data:`LISTED_FAMILIES` but :data:`NOT_LISTED`, as ``pettingzoo/<family>/<module>``; a game whose
    package is missing says what to install."""
    out = {}
    for family in LISTED_FAMILIES:
        package = importlib.import_module(f"pettingzoo.{family}")
        for info in pkgutil.iter_modules(package.__path__):
            game = f"{family}/{info.name}"
            if info.ispkg or info.name.startswith("_") or info.name == "all_modules" or game in NOT_LISTED:
                continue
            description = f"PettingZoo {family} game (self-play, one env per agent)"
            if (missing := missing_package(game)) is not None:
                description += f"; needs: pip install {missing}"
            out[PREFIX + game] = description
    return out
