"""Whether a user watches this process on a terminal: where progress bars and counters go, if anywhere."""

from __future__ import annotations

import sys
from typing import TextIO


def terminal_stream() -> TextIO | None:
    """The standard stream on a terminal, ``sys.stderr`` first, else ``sys.stdout``; ``None`` when neither is one.

    Under ``accelerate launch`` the script's stderr is a pipe (accelerate copies it through) while stdout is still the
    terminal: the progress goes to stdout there."""
    for stream in (sys.stderr, sys.stdout):
        try:
            if stream is not None and stream.isatty():
                return stream
        except (AttributeError, ValueError):  # replaced or closed streams
            continue
    return None


def on_terminal() -> bool:
    """Whether the user watches this process on a terminal (:func:`terminal_stream`)."""
    return terminal_stream() is not None


__all__ = ["on_terminal", "terminal_stream"]
