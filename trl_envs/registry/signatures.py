"""What the registry reads from a callable's signature: the keyword arguments a factory accepts, and a ``from_row``'s
row fields."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any


def accepted_kwargs(fn: Callable[..., Any]) -> set[str] | None:
    """Keyword names ``fn`` accepts, or ``None`` if it takes ``**kwargs`` (or has no readable signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def row_fields(from_row: Callable[..., Any]) -> dict[str, tuple[Any, Any]]:
    """``{field: (type or None, default or inspect.Parameter.empty)}`` of ``from_row(renderer, group_size, **fields)``
    (cached per function)."""
    try:
        return _ROW_FIELDS_CACHE[from_row]
    except KeyError:
        fields = _ROW_FIELDS_CACHE[from_row] = _read_row_fields(from_row)
        return fields
    except TypeError:  # unhashable callable: not cached
        return _read_row_fields(from_row)


_ROW_FIELDS_CACHE: dict[Any, dict[str, tuple[Any, Any]]] = {}


def _read_row_fields(from_row: Callable[..., Any]) -> dict[str, tuple[Any, Any]]:
    params = list(inspect.signature(from_row).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2:
        raise TypeError(f"from_row {from_row!r} must take (renderer, group_size, **fields)")
    try:
        hints = typing.get_type_hints(from_row)
    except Exception:  # unresolvable annotations: fields are then unchecked
        hints = {}
    return {
        p.name: (hints.get(p.name), p.default)
        for p in params[2:]
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


__all__ = ["accepted_kwargs", "row_fields"]
