"""The contract a turn-based game adapter implements (:class:`TurnGame`) and what a fixed opponent is."""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable

Opponent = Callable[[str, random.Random], str]
"""A fixed opponent: ``(the text its seat was just shown, a seeded rng) -> its reply``, played like a model reply."""


class IllegalReply(ValueError):
    """Raised by :meth:`TurnGame.random_reply` when the game cannot name a legal move for a seat."""


class TurnGame(ABC):
    """One game of ``num_players`` seats (``0 .. num_players - 1``), one seat to move at a time.

    A parallel (simultaneous-move) game is played as a turn-based one whose seats move in order within a round, as
    PettingZoo's ``parallel_to_aec`` does; rewards count once the round is complete.

    Implementations are driven by :class:`~trl_envs.multiplayer.match.GameMatch` only (one coroutine at a time, no
    locking needed). All methods are synchronous and quick (an in-process game).
    """

    num_players: int
    name: str = "game"

    @abstractmethod
    def to_move(self) -> int | None:
        """The seat whose reply the game waits for; ``None`` once the game is over."""

    @abstractmethod
    def observe(self, seat: int) -> str:
        """The text ``seat`` has not seen yet (the game's messages since its last observation), for its next turn."""

    @abstractmethod
    def play(self, seat: int, reply: str) -> bool:
        """Play ``seat``'s reply as the game says (an illegal or unreadable reply is handled by the game's rules:
        a penalty, a retry, a loss). Returns whether the reply was a legal move."""

    @abstractmethod
    def rewards(self) -> dict[int, float]:
        """Every seat's reward for the game so far (the final outcome once :meth:`to_move` is ``None``)."""

    def seat_name(self, seat: int) -> str:
        """How messages about the match name ``seat`` (``"seat 0"``; a game may name its seats, e.g. by mark)."""
        return f"seat {seat}"

    def random_reply(self, seat: int, rng: random.Random) -> str:
        """A legal reply for ``seat``, drawn with ``rng``: the ``"random"`` fixed opponent. Raises
        :class:`IllegalReply` where the game does not list its legal moves."""
        raise IllegalReply(
            f"{self.name}: this game does not list its legal moves, so it has no 'random' opponent; "
            "pass an opponent callable (text, rng) -> reply"
        )

    def close(self) -> None:  # noqa: B027 - a hook whose default does nothing
        """Release the game's resources (called once, when the match is done or abandoned)."""
