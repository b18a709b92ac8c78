"""``--env_kwargs``: an env's options as given on a command line (JSON) or in a YAML config (a mapping)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class EnvOptionError(ValueError, TypeError):
    """An env option the env does not take, or a required one missing: the message names it and the env's options.
    (A ``TypeError`` as a wrong keyword argument would be, and a ``ValueError``: a bad input, not a bug.)"""


def parse_env_kwargs(value: str | Mapping[str, Any] | None, option: str = "--env_kwargs") -> dict[str, Any]:
    """An env's options as given on a command line (a JSON object) or in a YAML config (a mapping); ``None`` is ``{}``.

    Raises ``ValueError`` naming ``option`` for invalid JSON or anything but an object.
    """
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{option}: invalid JSON {value!r}: {e}") from None
    if not isinstance(value, Mapping):
        raise ValueError(f"{option}: expected a JSON object such as '{{\"max_operand\": 3}}', got {value!r}")
    return dict(value)


__all__ = ["EnvOptionError", "parse_env_kwargs"]
