"""Quiet by default: the training scripts and ``trl-envs`` print what a user can act on, each warning on one line.

:func:`quiet_run` (called first by every command) drops the messages other libraries print on every run that say
nothing a user of trl_envs can change, and prints the warnings that remain on one line each
(``file:line: Category: message``, without Python's second line echoing the source line that warned):

* transformers' ``is_gradient_checkpointing is deprecated`` ``FutureWarning``: TRL reads the old property at every
  generation; there is no setting that avoids it (the configs themselves use the new names, see
  :mod:`trl_envs.trainers.activation_checkpointing`);
* DeepSpeed's ``Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it``,
  logged when it is imported on a machine without a GPU (the settings table already says ``use_cpu True``);
* the weight loading and shard writing progress bars of transformers when neither stdout nor stderr is a terminal
  (in a log file they are a line of carriage returns each).
"""

from __future__ import annotations

import logging
import warnings

from ..terminal import on_terminal

DROPPED_WARNINGS = (r"`is_gradient_checkpointing` is deprecated",)
"""Python warnings (message regexes) dropped."""
DROPPED_LOG_RECORDS = {"DeepSpeed": ("Setting accelerator to CPU",)}
"""Logger name -> message prefixes dropped."""


class _DropMessages(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]):
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).startswith(self.prefixes)


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as one line: ``file:line: Category: message`` (the message's lines joined)."""
    text = " ".join(str(message).split())
    return f"{filename}:{lineno}: {category.__name__}: {text}\n"


def quiet_run() -> None:
    """Install the filters and the one-line warning format of the module docstring (idempotent)."""
    for pattern in DROPPED_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    for name, prefixes in DROPPED_LOG_RECORDS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMessages) for f in logger.filters):
            logger.addFilter(_DropMessages(prefixes))
    warnings.formatwarning = one_line_warning
    if not on_terminal():
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


__all__ = ["DROPPED_LOG_RECORDS", "DROPPED_WARNINGS", "one_line_warning", "quiet_run"]
