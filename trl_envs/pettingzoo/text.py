"""PettingZoo observations as text and replies as actions.

:func:`tictactoe_text` draws the classic tic-tac-toe board; :func:`generic_text` shows any other observation as
numbers (:func:`trl_envs.gym.text.format_numbers`) with the legal actions (from the game's ``action_mask`` where it
has one). :func:`read_action` reads the last integer of a reply. :data:`FORMATTERS` picks the formatter by game
module name; pass ``formatter`` to the game for your own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..gym.text import MAX_NUMBERS_SHOWN, format_numbers

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
            f"pettingzoo: {agent}'s observation has {flat.size} numbers (more than {MAX_NUMBERS_SHOWN}); "
            "pass a formatter (agent, observation, legal) -> text for this game"
        )
    moves = ", ".join(map(str, legal)) if legal is not None else "see the action space"
    return (
        f"You are {agent}. Observation: {format_numbers(flat)}. Legal actions: {moves}. Reply with one action number."
    )


FORMATTERS: dict[str, Formatter] = {"tictactoe_v3": tictactoe_text}
"""Formatters by game module name; others use :func:`generic_text`."""
