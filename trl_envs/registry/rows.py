"""Env row specs: one JSON-serializable row (``{"env": "arithmetic", "a": 2, "b": 3}``) -> the
:class:`~trl_envs.core.types.EnvGroupBuilder` of one group, and the checks that name the row and field at fault.

The row's fields are its env kind's ``from_row`` keyword parameters
(:attr:`~trl_envs.registry.names.EnvKind.row_fields`): those without a default are required, annotations (``int``,
``float``, ``str``, ``bool``, ``list``, ``dict``) are checked. Row format, errors and design: docs/envs_as_datasets.md.
"""

from __future__ import annotations

import inspect
import types as pytypes
import typing
from collections.abc import Mapping
from typing import Any

from ..core.renderer import Renderer
from ..core.types import EnvGroupBuilder
from ..errors.messages import shorten
from .names import ENV_FIELD, get_env, known_env_names


class EnvRowError(ValueError):
    """A row spec that cannot become an env group: unknown env kind, missing, unknown or mistyped field. The message
    names the row index (when known) and the field."""


def make_env_group_builder(
    row: Mapping[str, Any], renderer: Renderer, group_size: int, *, index: int | None = None
) -> EnvGroupBuilder:
    """The :class:`EnvGroupBuilder` of ``group_size`` envs for one row spec (``{"env": NAME, **fields}``).

    ``None`` values count as absent (a dataset mixing env kinds has a column per field of any kind, null elsewhere).
    ``index`` (the row's position in its dataset) goes into error messages.

    Raises:
        EnvRowError: no ``env`` field, an unknown env kind (the message lists the kinds with row specs), an env kind
            without a row spec, a missing required field, a field the env does not take, a value of the wrong type,
            or ``from_row`` rejecting the values.
    """
    name, fields = validate_row(row, index=index)
    kind = get_env(name, allow_import=False)
    try:
        builder = kind.from_row(renderer, group_size, **fields)
    except Exception as e:
        raise EnvRowError(
            f"{_where(index)}: env {name!r} rejected the row {shorten(dict(fields))}: {shorten(str(e), 500)}"
        ) from e
    if not isinstance(builder, EnvGroupBuilder):
        raise TypeError(
            f"env {name!r} ({kind.source}): from_row returned {type(builder).__name__}, not an EnvGroupBuilder"
        )
    return builder


def validate_row(row: Mapping[str, Any], *, index: int | None = None) -> tuple[str, dict[str, Any]]:
    """Check one row spec against its env kind without building anything; return ``(env name, fields)`` with
    defaults left out, ``None`` values dropped and integral floats of ``int`` fields made ``int``.

    Raises:
        EnvRowError: as :func:`make_env_group_builder`.
    """
    where = _where(index)
    if not isinstance(row, Mapping):
        raise EnvRowError(
            f"{where}: a row spec is a mapping like {{'{ENV_FIELD}': 'arithmetic', 'a': 2, 'b': 3}}, got "
            f"{type(row).__name__}"
        )
    name = row.get(ENV_FIELD)
    if name is None and ENV_FIELD in row:
        raise EnvRowError(
            f"{where}, field {ENV_FIELD!r}: the env name is null; every row needs the name of its env "
            f"kind, e.g. {{'{ENV_FIELD}': 'arithmetic', ...}} (a mixed dataset written with missing "
            f"'{ENV_FIELD}' values gets nulls there)"
        )
    if name is None:
        raise EnvRowError(
            f"{where}: missing field {ENV_FIELD!r} (the env kind); fields present: {shorten(sorted(row))}"
        )
    if not isinstance(name, str):
        raise EnvRowError(f"{where}, field {ENV_FIELD!r}: expected an env name (str), got {shorten(name)}")
    try:
        kind = get_env(name, allow_import=False)
    except KeyError:
        by_name_only = sorted(known_env_names() - set(row_env_names()))
        raise EnvRowError(
            f"{where}, field {ENV_FIELD!r}: unknown env kind {shorten(name)}; env kinds with row specs: "
            f"{row_env_names()}" + (f" (by name only: {by_name_only})" if by_name_only else "")
        ) from None
    if kind.from_row is None:
        raise EnvRowError(
            f"{where}, field {ENV_FIELD!r}: env {name!r} ({kind.source}) has no row spec (no from_row), "
            f"so it trains by name only (--env_name {name}); env kinds with row specs: {row_env_names()}"
        )
    spec = kind.row_fields
    given = {k: v for k, v in row.items() if k != ENV_FIELD and v is not None}
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise EnvRowError(
            f"{where}, field {unknown[0]!r}: env {name!r} takes no field {unknown[0]!r}; its fields are "
            f"{_describe_fields(spec)} (drop other columns with dataset.remove_columns)"
        )
    missing = [k for k, (_, default) in spec.items() if default is inspect.Parameter.empty and k not in given]
    if missing:
        raise EnvRowError(
            f"{where}, field {missing[0]!r}: missing required field {missing[0]!r} of env {name!r}; its "
            f"fields are {_describe_fields(spec)}"
        )
    fields = {}
    for key, value in given.items():
        expected = spec[key][0]
        ok, value = _coerce(value, expected)
        if not ok:
            raise EnvRowError(
                f"{where}, field {key!r}: env {name!r} expects {_type_name(expected)}, got "
                f"{shorten(value)} ({type(value).__name__})"
            )
        fields[key] = value
    return name, fields


def row_env_names() -> list[str]:
    """The known env names that have a row spec (``from_row``), sorted."""
    out = []
    for name in sorted(known_env_names()):
        try:
            if get_env(name).from_row is not None:
                out.append(name)
        except Exception:  # a broken plugin: reported by get_env when asked for by name
            continue
    return out


# -- internals ---------------------------------------------------------------------------------------------------


def _coerce(value: Any, expected: Any) -> tuple[bool, Any]:
    """Whether ``value`` fits the annotation ``expected`` (plain types and unions of them are checked, anything else
    is accepted), and the value to use: an integral float for an ``int`` field becomes ``int`` and an int for a
    ``float`` field becomes ``float`` (JSON and Arrow may widen or narrow numbers)."""
    if expected is None or expected is Any:
        return True, value
    origin = typing.get_origin(expected)
    if origin is typing.Union or origin is pytypes.UnionType:
        for arg in typing.get_args(expected):
            ok, out = _coerce(value, arg)
            if ok:
                return True, out
        return False, value
    if expected is type(None):
        return value is None, value
    base = origin or expected
    if not isinstance(base, type):
        return True, value
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if base is int:
        if is_number and float(value).is_integer():
            return True, int(value)
        return False, value
    if base is float:
        return (True, float(value)) if is_number else (False, value)
    if base in (list, tuple):
        return isinstance(value, (list, tuple)), value
    if base is dict:
        return isinstance(value, Mapping), value
    return isinstance(value, base), value


def _type_name(t: Any) -> str:
    return getattr(t, "__name__", None) or str(t)


def _describe_fields(spec: dict[str, tuple[Any, Any]]) -> str:
    parts = []
    for k, (t, default) in spec.items():
        annotation = f": {_type_name(t)}" if t is not None else ""
        parts.append(f"{k}{annotation}" + ("" if default is inspect.Parameter.empty else f" = {default!r}"))
    return "(" + ", ".join(parts) + ")"


def _where(index: int | None) -> str:
    return f"env row {index}" if index is not None else "env row"


__all__ = ["EnvRowError", "make_env_group_builder", "row_env_names", "validate_row"]
