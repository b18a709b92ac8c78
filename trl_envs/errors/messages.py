"""Values and messages cut to a readable length, so an error stays one readable line whatever it echoes."""

from __future__ import annotations

from typing import Any

MAX_VALUE_CHARS = 200
"""Longest value (its ``repr``) echoed in a message; longer ones are cut and their length named."""
MAX_MESSAGE_CHARS = 2000
"""Longest error message a command prints (:func:`trl_envs.cli.errors.run_command`)."""


def shorten(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """``repr(value)``, cut to about ``limit`` characters with the full length named: safe to put in a message."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def shorten_message(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` cut to ``limit`` characters (its head and tail kept), with the number of characters left out."""
    if len(message) <= limit:
        return message
    half = limit // 2
    return f"{message[:half]} [... {len(message) - 2 * half:,} characters left out ...] {message[-half:]}"


__all__ = ["MAX_MESSAGE_CHARS", "MAX_VALUE_CHARS", "shorten", "shorten_message"]
