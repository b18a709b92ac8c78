"""Helpers for scripted tic-tac-toe players (played through :class:`trl_envs.samplers.text_policy.TextPolicySampler`):
reading the last board of a prompt's text."""

from __future__ import annotations

import re

_ROW = re.compile(r"^([1-9XO])\|([1-9XO])\|([1-9XO])", re.M)


def last_board(prompt_text: str) -> list[str]:
    """The nine cells of the last board shown in a tic-tac-toe prompt."""
    rows = _ROW.findall(prompt_text)[-3:]
    return [c for row in rows for c in row]


def free_cells(prompt_text: str) -> list[int]:
    return [int(c) for c in last_board(prompt_text) if c.isdigit()]
