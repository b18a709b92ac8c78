"""Scripted tic-tac-toe opponents for evaluation: a random player and a perfect (minimax) player, and
:class:`TextOpponent`, which lets one play a seat of a match from the text that seat is shown."""

from __future__ import annotations

import functools
import random
from typing import Protocol

from .rules import Board, Mark, legal_moves, other, place, read_board, winner


class Opponent(Protocol):
    """Chooses a cell (1..9) for ``mark`` on ``board``; ``rng`` makes its choices reproducible."""

    name: str

    def choose(self, board: Board, mark: Mark, rng: random.Random) -> int: ...


class RandomOpponent:
    """Plays a uniformly random free cell."""

    name = "random"

    def choose(self, board: Board, mark: Mark, rng: random.Random) -> int:
        return rng.choice(legal_moves(board))


class PerfectOpponent:
    """Never loses: plays a minimax-optimal cell (ties broken at random; among equal outcomes, the quickest win
    and the slowest loss)."""

    name = "perfect"

    def choose(self, board: Board, mark: Mark, rng: random.Random) -> int:
        scored = [(_value(place(board, cell, mark), other(mark), mark), cell) for cell in legal_moves(board)]
        best = max(v for v, _ in scored)
        return rng.choice([cell for v, cell in scored if v == best])


@functools.cache
def _value(board: Board, to_move: Mark, me: Mark) -> int:
    """Minimax value of ``board`` for ``me`` with ``to_move`` to play: 10 - depth for a win, 0 draw, depth - 10 loss."""
    result = winner(board)
    depth = 9 - board.count(" ")
    if result == me:
        return 10 - depth
    if result == "draw":
        return 0
    if result is not None:
        return depth - 10
    values = [_value(place(board, cell, to_move), other(to_move), me) for cell in legal_moves(board)]
    return max(values) if to_move == me else min(values)


class TextOpponent:
    """``opponent`` as a :data:`trl_envs.multiplayer.game.Opponent` (``(text, rng) -> reply``): it reads the board
    from the text its seat is shown, as a model would, and answers with its cell."""

    def __init__(self, opponent: Opponent):
        self.opponent = opponent
        self.__name__ = opponent.name

    def __call__(self, text: str, rng: random.Random) -> str:
        board = read_board(text)
        mark: Mark = "X" if board.count("X") == board.count("O") else "O"
        cell = self.opponent.choose(board, mark, rng)
        if cell not in legal_moves(board):
            raise RuntimeError(f"tic_tac_toe: opponent {self.opponent.name!r} chose taken cell {cell}")
        return str(cell)


OPPONENTS: dict[str, type] = {"random": RandomOpponent, "perfect": PerfectOpponent}


def make_opponent(name: str) -> Opponent:
    """The opponent called ``name`` (``"random"`` or ``"perfect"``)."""
    try:
        return OPPONENTS[name]()
    except KeyError:
        raise ValueError(f"tic_tac_toe: unknown opponent {name!r}; choose one of {sorted(OPPONENTS)}") from None
