"""PettingZoo observations as text and replies as actions.

:func:`tictactoe_text`, :func:`connect_four_text` and :func:`go_text` draw those boards; :func:`generic_text` shows
any other observation as numbers (:func:`trl_envs.gym.text.format_numbers`, at most
:data:`~trl_envs.gym.text.MAX_NUMBERS_SHOWN`) with the legal actions (from the game's ``action_mask`` where it has
one). :func:`read_action` reads the last integer of a reply. The ``formatter`` option picks one by name
(:data:`FORMATTERS`) or import path; :data:`GAME_FORMATTERS` is each game's default.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..gym.text import MAX_NUMBERS_SHOWN, format_numbers
from ..multiplayer.group import import_function

_LAST_INT = re.compile(r"(-?\d+)(?!.*\d)", re.DOTALL)

Formatter = Callable[[str, Any, "list[int] | None"], str]
"""``(agent, observation, legal actions or None) -> text``."""


def split_observation(observation: Any) -> tuple[Any, list[int] | None]:
    """``(observation, legal actions)`` of a plain or ``{"observation", "action_mask"}`` observation."""
    if isinstance(observation, dict) and "observation" in observation:
        mask = observation.get("action_mask")
        legal = [int(i) for i in np.flatnonzero(np.asarray(mask))] if mask is not None else None
        return observation["observation"], legal
    return observation, None


def read_action(reply: str) -> int | None:
    """The last integer of ``reply`` (``"I play 4"`` -> 4), or ``None`` when it has none."""
    m = _LAST_INT.search(reply)
    return int(m.group(1)) if m else None


def tictactoe_text(agent: str, observation: Any, legal: list[int] | None) -> str:
    """The board (``X`` = this agent's marks, ``O`` = the opponent's, free cells by their action number)."""
    planes = np.asarray(observation)
    cells = []
    for k in range(9):
        r, c = divmod(k, 3)
        cells.append("X" if planes[r, c, 0] else "O" if planes[r, c, 1] else str(k))
    board = "\n".join("|".join(cells[r * 3 : r * 3 + 3]) for r in range(3))
    moves = ", ".join(map(str, legal)) if legal is not None else "0-8"
    return f"Tic-tac-toe. You are X.\n{board}\nPick a free cell: {moves}."


def generic_text(agent: str, observation: Any, legal: list[int] | None) -> str:
    """``You are <agent>. Observation: ...; legal actions: ...``; refuses observations too large for a prompt."""
    flat = np.asarray(observation).reshape(-1)
    if flat.size > MAX_NUMBERS_SHOWN:
        raise ValueError(
            f"pettingzoo: {agent}'s observation has {flat.size} numbers (more than {MAX_NUMBERS_SHOWN} would not "
            f"read as text); choose a formatter: option 'formatter', one of {sorted(FORMATTERS)} or "
            "'package.module:function' (agent, observation, legal actions) -> text"
        )
    moves = ", ".join(map(str, legal)) if legal is not None else "see the action space"
    return (
        f"You are {agent}. Observation: {format_numbers(flat)}. Legal actions: {moves}. Reply with one action number."
    )


def connect_four_text(agent: str, observation: Any, legal: list[int] | None) -> str:
    """The board, top row first (``X`` = this agent's discs, ``O`` = the opponent's), and the open columns."""
    planes = np.asarray(observation)
    rows, cols = planes.shape[0], planes.shape[1]
    lines = [
        " ".join("X" if planes[r, c, 0] else "O" if planes[r, c, 1] else "." for c in range(cols)) for r in range(rows)
    ]
    board = "\n".join(lines + [" ".join(str(c) for c in range(cols))])
    moves = ", ".join(map(str, legal)) if legal is not None else f"0-{cols - 1}"
    return f"Connect Four. You are X; connect four of yours in a row.\n{board}\nDrop a disc in a column: {moves}."


def go_text(agent: str, observation: Any, legal: list[int] | None) -> str:
    """The board (``X`` = this agent's stones, ``O`` = the opponent's); an action is ``row * size + column``, and
    ``size * size`` passes."""
    planes = np.asarray(observation)
    size = planes.shape[0]
    lines = [
        f"{r:2d} " + " ".join("X" if planes[r, c, 0] else "O" if planes[r, c, 1] else "." for c in range(size))
        for r in range(size)
    ]
    board = "\n".join(["   " + " ".join(str(c % 10) for c in range(size))] + lines)
    moves = ", ".join(map(str, legal)) if legal is not None else f"0-{size * size}"
    return (
        f"Go on a {size}x{size} board. You are X. A move is row * {size} + column; {size * size} passes.\n{board}\n"
        f"Legal moves: {moves}."
    )


FORMATTERS: dict[str, Formatter] = {
    "tictactoe": tictactoe_text,
    "connect_four": connect_four_text,
    "go": go_text,
    "numbers": generic_text,
}
"""Formatters by name, the values of the ``formatter`` option (which also takes ``"package.module:function"``)."""

GAME_FORMATTERS: dict[str, str] = {"tictactoe_v3": "tictactoe", "connect_four_v3": "connect_four", "go_v5": "go"}
"""The formatter each game module uses by default; others use ``"numbers"`` (:func:`generic_text`)."""


def resolve_formatter(name: str, formatter: Formatter | str | None, game: str) -> Formatter:
    """The formatter of ``game`` (``"<family>/<module>"``): ``formatter`` as a callable, a :data:`FORMATTERS` name or
    ``"package.module:function"``, or the game's default; ``ValueError`` naming env ``name`` otherwise."""
    if callable(formatter):
        return formatter
    if formatter is None:
        return FORMATTERS[GAME_FORMATTERS.get(game.rpartition("/")[2], "numbers")]
    if isinstance(formatter, str) and formatter in FORMATTERS:
        return FORMATTERS[formatter]
    if isinstance(formatter, str) and ":" in formatter:
        return import_function(name, "formatter", formatter, "(agent, observation, legal actions) -> text")
    raise ValueError(
        f"env {name!r}: option 'formatter' must be one of {sorted(FORMATTERS)} or 'package.module:function' "
        f"(agent, observation, legal actions) -> text; got {formatter!r}"
    )
