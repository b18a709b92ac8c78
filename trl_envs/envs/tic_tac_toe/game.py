"""Tic-tac-toe as a :class:`~trl_envs.multiplayer.game.TurnGame`: seat 0 plays X (moves first), seat 1 plays O.

What a player is shown each turn: on its first turn ``Tic-tac-toe. You are X.``, then the other player's last move
(``O played 5.``, or that it lost by an illegal move), the board and the instruction. A reply is a bare cell number
1..9; anything else, or a taken cell, loses the game at once (the other player wins).
"""

from __future__ import annotations

import random

from ...multiplayer.game import TurnGame
from .rules import EMPTY_BOARD, Board, Mark, Outcome, legal_moves, other, parse_move, place, show, winner

MARKS: tuple[Mark, Mark] = ("X", "O")
"""The mark of each seat."""

INSTRUCTION = "Pick a free cell between 1 and 9."
"""Ends every message to a player. (Worded so that the offline tiny model, warm-started on "Guess my number between
1 and 16.", answers with a digit most of the time: RL then has legal games to learn from.)"""


def seat_of(player: int | Mark) -> int:
    """The seat of ``player``, given as a seat number (0, 1) or a mark (``"X"``, ``"O"``)."""
    if player in MARKS:
        return MARKS.index(player)  # type: ignore[arg-type]
    if player in (0, 1) and not isinstance(player, bool):
        return int(player)
    raise ValueError(f"tic_tac_toe: a player is 'X', 'O', 0 or 1, got {player!r}")


class TicTacToeGame(TurnGame):
    """One game on an empty board.

    Args:
        seed: unused (every game starts empty); taken so that the class is a ``make_game(seed)`` factory.
        name: names the game in error messages.

    Attributes:
        board: the cells (see :mod:`.rules`).
        result: ``"X"``, ``"O"`` or ``"draw"`` once the game is over, else ``None``.
        forfeited_by: the mark that lost by an illegal or unreadable reply, if one did.
        history: ``(mark, cell)`` of every legal move, in order.
    """

    num_players = 2

    def __init__(self, seed: int = 0, name: str = "tic_tac_toe"):
        self.name = name
        self.board: Board = EMPTY_BOARD
        self.turn: Mark = "X"
        self.result: Outcome | None = None
        self.forfeited_by: Mark | None = None
        self.history: list[tuple[Mark, int]] = []
        self._introduced = [False, False]

    def to_move(self) -> int | None:
        return None if self.result is not None else MARKS.index(self.turn)

    def seat_name(self, seat: int) -> str:
        return f"player {MARKS[seat]}"

    def observe(self, seat: int) -> str:
        mark = MARKS[seat]
        lines = [] if self._introduced[seat] else [f"Tic-tac-toe. You are {mark}."]
        self._introduced[seat] = True
        if self.forfeited_by == other(mark):
            lines.append(f"{other(mark)} made an illegal move and lost.")
        elif self.history and self.history[-1][0] != mark:
            lines.append(f"{self.history[-1][0]} played {self.history[-1][1]}.")
        return "\n".join(lines + [show(self.board), INSTRUCTION])

    def play(self, seat: int, reply: str) -> bool:
        mark = MARKS[seat]
        cell = parse_move(reply)
        if cell is None or self.board[cell - 1] != " ":
            self.result, self.forfeited_by = other(mark), mark
            return False
        self.board = place(self.board, cell, mark)
        self.history.append((mark, cell))
        self.result = winner(self.board)
        self.turn = other(mark)
        return True

    def rewards(self) -> dict[int, float]:
        """+1 for the winner, -1 for the loser, 0 each for a draw or an unfinished game (zero-sum)."""
        if self.result is None or self.result == "draw":
            return {0: 0.0, 1: 0.0}
        return {seat: 1.0 if mark == self.result else -1.0 for seat, mark in enumerate(MARKS)}

    def random_reply(self, seat: int, rng: random.Random) -> str:
        return str(rng.choice(legal_moves(self.board)))
