"""Tic-tac-toe rules: the board, legal moves, the winner, how a board is shown and how a move is read."""

from __future__ import annotations

import re
from typing import Literal, TypeAlias

Mark: TypeAlias = Literal["X", "O"]
Outcome: TypeAlias = Literal["X", "O", "draw"]
Board: TypeAlias = tuple[str, ...]
"""Nine cells, row by row, each ``"X"``, ``"O"`` or ``" "``; cell numbers shown to the model are 1..9."""

EMPTY_BOARD: Board = (" ",) * 9
LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
_MOVE = re.compile(r"^\s*([1-9])\s*\.?\s*$")
_ROW = re.compile(r"^[XO1-9]\|[XO1-9]\|[XO1-9]$")


def other(mark: Mark) -> Mark:
    return "O" if mark == "X" else "X"


def legal_moves(board: Board) -> list[int]:
    """The free cells, numbered 1..9."""
    return [i + 1 for i, c in enumerate(board) if c == " "]


def place(board: Board, cell: int, mark: Mark) -> Board:
    """``board`` with ``mark`` on ``cell`` (1..9); raises ``ValueError`` for a taken or unknown cell."""
    if not 1 <= cell <= 9 or board[cell - 1] != " ":
        raise ValueError(f"tic-tac-toe: cell {cell} is not free on {show(board)!r}")
    return board[: cell - 1] + (mark,) + board[cell:]


def winner(board: Board) -> Outcome | None:
    """``"X"`` / ``"O"`` for three in a row, ``"draw"`` for a full board without one, ``None`` while the game goes
    on."""
    for a, b, c in LINES:
        if board[a] != " " and board[a] == board[b] == board[c]:
            return board[a]  # type: ignore[return-value]
    return "draw" if " " not in board else None


def show(board: Board) -> str:
    """Three lines like ``X|2|3``: taken cells show their mark, free cells their number."""
    cells = [c if c != " " else str(i + 1) for i, c in enumerate(board)]
    return "\n".join("|".join(cells[r * 3 : r * 3 + 3]) for r in range(3))


def read_board(text: str) -> Board:
    """The last board :func:`show` wrote in ``text``; raises ``ValueError`` when ``text`` shows none."""
    lines = text.splitlines()
    for end in range(len(lines), 2, -1):
        rows = lines[end - 3 : end]
        if all(_ROW.match(row) for row in rows):
            return tuple(" " if c.isdigit() else c for row in rows for c in row.split("|"))
    raise ValueError(f"tic-tac-toe: no board in {text!r}")


def parse_move(text: str) -> int | None:
    """The cell a reply names: a bare digit 1..9 (a trailing period allowed), else ``None``."""
    m = _MOVE.match(text)
    return int(m.group(1)) if m else None
