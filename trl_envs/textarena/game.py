"""A TextArena game as a :class:`~trl_envs.multiplayer.game.TurnGame`.

The game is made with ``textarena.make(env_id)`` (its default wrappers: replies without brackets get them, as
``[4]``) and reset with ``num_players`` and ``seed``. Each seat is shown the game's own messages, formatted as
TextArena's ``LLMObservationWrapper`` does (``[GAME] ...``, ``[Player 0] ...``), but only those it has not seen
yet, so the seat's conversation grows turn by turn. A reply goes to ``env.step`` as the model wrote it: the game
decides whether it is legal (``set_invalid_move``) and what follows (a retry within its error allowance, or a loss).
The rewards are the game's ``state.rewards``.

textarena is imported when a game is made, never by ``import trl_envs``.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..multiplayer.game import IllegalReply, TurnGame

_MOVES_LINE = re.compile(
    r"(?:available|valid|legal) (?:moves?|actions?)(?: are)?\s*:(.*)$", re.IGNORECASE | re.MULTILINE
)
_BRACKETED = re.compile(r"\[[^\[\]\n]+\]")
PLAYER_COUNTS = (2, 1, 3, 4, 5, 6)
"""The player counts tried, in order, for a game started without ``num_players``: the first the game accepts."""


def _connect_four_moves(env: Any) -> list[str]:
    board = env.state.game_state["board"]
    return [f"[col {c}]" for c in range(len(board[0])) if board[0][c] == "."]


def _nim_moves(env: Any) -> list[str]:
    piles = env.state.game_state["piles"]
    return [f"[{i} {q}]" for i, n in enumerate(piles) for q in range(1, n + 1)]


LEGAL_MOVES: dict[str, Callable[[Any], list[str]]] = {"ConnectFourEnv": _connect_four_moves, "NimEnv": _nim_moves}
"""Legal-move generators of games that do not list their moves to the players, by the game's class name: what the
``"random"`` opponent draws from for them."""


def import_textarena():
    try:
        import textarena
    except ImportError as e:
        raise ImportError(
            "TextArena games need textarena: pip install 'trl-envs[textarena]' (see docs/ecosystem.md "
            "for the exact install)"
        ) from e
    return textarena


class TextArenaGame(TurnGame):
    """One TextArena game. ``make_kwargs`` go to ``textarena.make``."""

    def __init__(
        self, env_id: str, num_players: int | None = None, seed: int = 0, make_kwargs: dict[str, Any] | None = None
    ):
        ta = import_textarena()
        self.name = f"textarena/{env_id}"
        self._random_state = random.Random(seed).getstate()
        counts = PLAYER_COUNTS if num_players is None else (num_players,)
        for count in counts:
            try:
                with self._own_random():
                    self.env = ta.make(env_id, **(make_kwargs or {}))
                    self.env.reset(num_players=count, seed=seed)
                break
            except AssertionError as e:  # TextArena's way of refusing a player count: try the next one
                if count == counts[-1]:
                    raise ValueError(self._start_error(num_players, make_kwargs, e)) from e
            except Exception as e:
                raise ValueError(self._start_error(num_players, make_kwargs, e)) from e
        self.num_players = count
        self.state = self.env.state
        self._done = False
        self._invalid = False
        self._last_text: dict[int, str] = {}
        set_invalid_move = self.state.set_invalid_move

        def recording_set_invalid_move(*args: Any, **kwargs: Any) -> Any:  # the game's own verdict on a reply
            self._invalid = True
            return set_invalid_move(*args, **kwargs)

        self.state.set_invalid_move = recording_set_invalid_move

    def _start_error(self, num_players: int | None, make_kwargs: dict[str, Any] | None, error: Exception) -> str:
        players = f"num_players={num_players}" if num_players is not None else f"any of {list(PLAYER_COUNTS)} players"
        if isinstance(error, LookupError) and (found := re.search(r"Resource '?([\w/.]+)'? not found", str(error))):
            return (
                f"env {self.name!r}: the game needs NLTK's {found[1]!r} data, which is not installed: "
                f"python -c \"import nltk; nltk.download('{found[1]}')\""
            )
        message = " ".join(str(error).split())  # one line, whatever the game's message looked like
        return (
            f"env {self.name!r}: textarena could not start the game with {players}, options {make_kwargs or {}}: "
            f"{type(error).__name__}: {message}"
        )

    def to_move(self) -> int | None:
        return None if self._done or self.state.done else int(self.state.current_player_id)

    def observe(self, seat: int) -> str:
        pending = self.state.observations.get(seat) or []
        self.state.observations[seat] = []
        roles = getattr(self.state, "role_mapping", {}) or {}
        lines = []
        for sender, message, _ in pending:
            who = "GAME" if sender == -1 else roles.get(sender, f"Player {sender}")
            lines.append(f"[{who}] {message}")
        text = "\n".join(lines)
        self._last_text[seat] = text
        return text

    def play(self, seat: int, reply: str) -> bool:
        self._invalid = False
        with self._own_random():
            done, _ = self.env.step(reply)
        self._done = bool(done)
        return not self._invalid

    def rewards(self) -> dict[int, float]:
        return {int(k): float(v) for k, v in (self.state.rewards or {}).items()}

    def random_reply(self, seat: int, rng: random.Random) -> str:
        """A move drawn from the bracketed moves of the last 'Available Moves:' (or '... actions are:') line the seat
        was shown, or from the game's :data:`LEGAL_MOVES` generator."""
        found = _MOVES_LINE.findall(self._last_text.get(seat, ""))
        moves = _BRACKETED.findall(found[-1]) if found else []
        generator = LEGAL_MOVES.get(type(_innermost(self.env)).__name__)
        if not moves and generator is not None:
            moves = generator(_innermost(self.env))
        if not moves:
            raise IllegalReply(
                f"{self.name}: the game listed no 'Available Moves:' to seat {seat}, so the 'random' opponent cannot "
                "play it; play it in self-play (option opponent null) or name an opponent function (text, rng) -> "
                "reply: option opponent 'my_module:my_opponent'"
            )
        return rng.choice(moves)

    def close(self) -> None:
        self.env.close()  # reports the results, which we read from the state instead

    @contextlib.contextmanager
    def _own_random(self) -> Iterator[None]:
        """Run TextArena code on this game's own stream of the global ``random`` module: its games call
        ``random.seed(seed)`` on reset and draw from ``random`` as they play, which would reseed every other user of
        ``random`` in the process (other envs of the batch drawing problems) and make this game's draws depend on
        theirs. The process's stream is put back after each call."""
        outer = random.getstate()
        random.setstate(self._random_state)
        try:
            yield
        finally:
            self._random_state = random.getstate()
            random.setstate(outer)


def _innermost(env: Any) -> Any:
    """The game under TextArena's wrappers."""
    while hasattr(env, "env") and env.env is not env:
        env = env.env
    return env


@dataclass(frozen=True)
class TextArenaGameFactory:
    """``factory(seed) -> TextArenaGame``: picklable, so groups of it are."""

    env_id: str
    num_players: int | None = None
    make_kwargs: dict[str, Any] = field(default_factory=dict)

    def __call__(self, seed: int) -> TextArenaGame:
        return TextArenaGame(self.env_id, self.num_players, seed, self.make_kwargs)
