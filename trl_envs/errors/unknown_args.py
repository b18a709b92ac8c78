"""Misspelled flags and YAML keys of the training scripts: one line naming the name, with a did-you-mean.

:func:`check_known_args` runs before the scripts' ``TrlParser`` parses, so a typo (``--learnign_rate``, a YAML key
``learnign_rate:``) is reported in the user's words, with the closest known names (``difflib``), instead of
transformers' "not used by the HfArgumentParser" or TRL's advice to edit its dataclasses.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .types import UsageError

YAML_ENV_KEY = "env"
"""TRL's YAML key that sets environment variables (not a setting of the run)."""


def did_you_mean(name: str, known: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean --x?)`` / `` (did you mean --x or --y?)`` for the names of ``known`` close to ``name``, else
    ``""``."""
    close = difflib.get_close_matches(name, sorted(set(known)), n=2, cutoff=0.75)
    if not close:
        return ""
    return " (did you mean " + " or ".join(f"{prefix}{c}" for c in close) + "?)"


def check_known_args(
    parser, argv: Sequence[str], config: Mapping[str, Any] | None = None, config_path: str = ""
) -> None:
    """Every ``--flag`` of ``argv`` and every key of the ``--config`` YAML mapping ``config`` (read from
    ``config_path``) is one ``parser`` knows.

    Raises:
        UsageError: the first unknown one, with the closest known names.
    """
    options = {s for action in parser._actions for s in action.option_strings if s.startswith("--")} | {"--config"}
    named = {o for o in options if "-" not in o[2:] or o[:2] + o[2:].replace("-", "_") not in options}
    for token in argv:
        if not token.startswith("--") or token == "--":
            continue
        name = token.split("=", 1)[0]
        if name in options or any(option.startswith(name) for option in options):  # argparse takes unique prefixes
            continue
        raise UsageError(
            f"unknown flag {name}{did_you_mean(name, named)}; --help lists the flags (each is also a YAML key of "
            "--config)"
        )
    dests = {action.dest for action in parser._actions if action.option_strings}
    for key in config or {}:
        if key == YAML_ENV_KEY or key in dests:
            continue
        raise UsageError(
            f"--config {config_path}: unknown key {key!r}{did_you_mean(str(key), dests)}; the keys are the flags' "
            "names without the dashes (--help lists them)"
        )


__all__ = ["check_known_args", "did_you_mean"]
