"""One tic-tac-toe game shared by its two players: a :class:`~trl_envs.multiplayer.match.GameMatch` of a
:class:`~.game.TicTacToeGame` whose players may be named by mark.

How players wait on each other (parked, bounded by ``move_timeout``, woken with :class:`OpponentAbandoned` when the
other one fails) is :mod:`trl_envs.multiplayer.match`'s.
"""

from __future__ import annotations

from ...multiplayer.game import Opponent
from ...multiplayer.match import GameMatch, OpponentAbandoned, OpponentTimeout
from .game import MARKS, TicTacToeGame, seat_of
from .rules import Board, Mark, Outcome

__all__ = ["OpponentAbandoned", "OpponentTimeout", "TicTacToeMatch"]


class TicTacToeMatch(GameMatch):
    """A game between two players; X moves first. A player is its mark (``"X"``, ``"O"``) or its seat (0, 1).

    Args:
        move_timeout: seconds a player waits for the other's move before :class:`OpponentTimeout`.
        name: names the game in error messages.
        opponents: players played by a fixed opponent (an :data:`~trl_envs.multiplayer.game.Opponent`, e.g.
            :class:`~.opponents.TextOpponent`, or ``"random"``), by mark or seat.
        seed: seeds the opponents' rng.
    """

    game: TicTacToeGame

    def __init__(
        self,
        move_timeout: float = 120.0,
        name: str = "tic_tac_toe",
        opponents: dict[int | Mark, Opponent | str] | None = None,
        seed: int = 0,
    ):
        seats = {seat_of(player): opponent for player, opponent in (opponents or {}).items()}
        super().__init__(TicTacToeGame(name=name), seats, move_timeout, seed)

    @property
    def board(self) -> Board:
        return self.game.board

    @property
    def to_move(self) -> Mark | None:
        """The mark whose move the game waits for; ``None`` once it is over."""
        seat = None if self.over else self.game.to_move()
        return None if seat is None else MARKS[seat]

    @property
    def forfeited_by(self) -> Mark | None:
        """The mark that lost by an illegal or unreadable move, if one did."""
        return self.game.forfeited_by

    @property
    def result(self) -> Outcome | None:
        """``"X"``, ``"O"`` or ``"draw"`` once the game is over, else ``None`` (also when abandoned)."""
        return self.game.result

    def score(self, seat: int | Mark) -> float:
        return super().score(seat_of(seat))

    def play(self, seat: int | Mark, reply: str | int | None) -> bool:
        """``seat`` plays ``reply`` (a cell number or a reply's text); ``None``, a taken cell or an unreadable reply
        forfeits the game. Returns whether the move was legal."""
        return super().play(seat_of(seat), "" if reply is None else str(reply))

    def abandon(self, seat: int | Mark) -> None:
        super().abandon(seat_of(seat))

    async def wait_for_turn(self, seat: int | Mark) -> None:
        await super().wait_for_turn(seat_of(seat))
