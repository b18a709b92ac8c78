"""The env registry: env kinds by name, and what each can do.

An *env kind* (:class:`EnvKind`) is a name with up to two capabilities:

* **by name** (``dataset_builder``): a factory called as ``factory(renderer=..., **kwargs)`` that returns an
  :class:`~trl_envs.core.types.RLDatasetBuilder` or :class:`~trl_envs.core.types.RLDataset` — how every built-in env of
  :data:`trl_envs.envs.BUILTIN_ENVS` trains (``--env_name arithmetic``);
* **from rows** (``from_row``): a function ``from_row(renderer, group_size, **fields)`` that turns one
  JSON-serializable *row spec* such as ``{"env": "arithmetic", "a": 2, "b": 3}`` into the
  :class:`~trl_envs.core.types.EnvGroupBuilder` of one group. Any ``datasets.Dataset`` of such rows is then an
  ``RLDataset`` (:class:`trl_envs.registry.env_datasets.EnvRowDataset`). The row's fields are ``from_row``'s keyword
  parameters: those without a default are required, annotations (``int``, ``float``, ``str``, ``bool``, ``list``,
  ``dict``) are checked.

Where names come from, in order of precedence:

1. :func:`register_env` (this process);
2. the built-in envs, :data:`trl_envs.envs.BUILTIN_ENVS` (a factory there gains row support by having a
   ``from_row`` attribute; its description is the first line of its docstring);
3. other installed packages, through the entry-point group ``trl_envs.envs`` (see :data:`ENTRY_POINT_GROUP`),
   read lazily with :mod:`importlib.metadata` (cached, and read again whenever a name is found neither above nor in
   the cache, and by :func:`list_envs`);
4. for training by name only, ``"package.module:attr"``, imported on demand (never for rows: a dataset cannot make
   trl_envs import code).

Row format, errors and design: docs/envs_as_datasets.md.
"""

from __future__ import annotations

import importlib
import json
import inspect
import types as pytypes
import typing
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from typing import Any

from ..core.renderer import Renderer
from ..core.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder

ENTRY_POINT_GROUP = "trl_envs.envs"
"""Packages ship envs with an entry point in this group: the name is the env name, the object is an
:class:`EnvKind` or a dataset-builder factory (optionally with a ``from_row`` attribute). In ``pyproject.toml``::

    [project.entry-points."trl_envs.envs"]
    my_env = "my_package.envs:MY_ENV"
"""

ENV_FIELD = "env"
"""The row field naming the env kind."""

SIZING_KWARGS = ("group_size", "batch_size", "num_batches")
"""Keyword arguments :func:`make_env_dataset` passes to a by-name factory only when its signature accepts them."""


class EnvRowError(ValueError):
    """A row spec that cannot become an env group: unknown env kind, missing, unknown or mistyped field. The message
    names the row index (when known) and the field."""


class UnknownEnvError(KeyError):
    """No env of that name; the message lists the known ones."""

    def __str__(self) -> str:  # KeyError would show the message quoted
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class EnvKind:
    """One named kind of env.

    Attributes:
        name: the name rows and ``--env_name`` use.
        description: one line, shown by :func:`list_envs`.
        dataset_builder: ``factory(renderer=..., **kwargs)`` -> ``RLDatasetBuilder`` or ``RLDataset``; ``None`` if the
            kind trains only from rows.
        from_row: ``from_row(renderer, group_size, **fields)`` -> ``EnvGroupBuilder``; ``None`` if the kind has no
            row spec. Its keyword parameters are the row's fields.
        source: where the kind came from (``"registered"``, ``"builtin"``, ``"entry point <dist>"``, ``"import"``).
    """

    name: str
    description: str = ""
    dataset_builder: Callable[..., RLDatasetBuilder | RLDataset] | None = None
    from_row: Callable[..., EnvGroupBuilder] | None = None
    source: str = "registered"

    def __post_init__(self) -> None:
        if self.dataset_builder is None and self.from_row is None:
            raise ValueError(f"EnvKind {self.name!r}: give a dataset_builder (train by name), a from_row (train from "
                             "row specs), or both")

    @property
    def row_fields(self) -> dict[str, tuple[Any, Any]]:
        """The row's fields: ``{field: (type or None, default or inspect.Parameter.empty)}``; empty without rows."""
        return _row_fields(self.from_row) if self.from_row is not None else {}

    @classmethod
    def from_factory(cls, name: str, factory: Any, source: str) -> EnvKind:
        """The kind of a :data:`~trl_envs.envs.BUILTIN_ENVS`-style factory (or an ``EnvKind``, renamed)."""
        if isinstance(factory, EnvKind):
            return replace(factory, name=name, source=source)
        if not callable(factory):
            raise TypeError(f"env {name!r} ({source}): expected an EnvKind or a callable dataset-builder factory, got "
                            f"{type(factory).__name__}")
        return cls(name, _first_line(factory), factory, getattr(factory, "from_row", None), source)


_REGISTERED: dict[str, EnvKind] = {}
_ENTRY_POINTS: dict[str, metadata.EntryPoint] | None = None  # read lazily
_LOADED_ENTRY_POINTS: dict[str, EnvKind] = {}


def register_env(name: str, dataset_builder: Callable[..., RLDatasetBuilder | RLDataset] | None = None, *,
                 from_row: Callable[..., EnvGroupBuilder] | None = None, description: str | None = None,
                 overwrite: bool = False) -> EnvKind:
    """Register an env kind under ``name`` for this process and return it.

    Args:
        name: the env name (no ``:``, which marks ``module:attr`` references).
        dataset_builder: ``factory(renderer=..., **kwargs)`` returning an ``RLDatasetBuilder`` or ``RLDataset`` (train
            by name). Its ``from_row`` attribute, if any, is used when ``from_row`` is not given.
        from_row: ``from_row(renderer, group_size, **fields)`` returning the ``EnvGroupBuilder`` of one row spec.
        description: one line for :func:`list_envs` (default: first line of the factory's or from_row's docstring).
        overwrite: replace an existing registration (otherwise registering a taken name raises).

    Raises:
        ValueError: the name is taken (registered or built in) and ``overwrite`` is false, or neither capability is
            given. (A registered name shadows an installed env of the same name.)
    """
    if not name or ":" in name:
        raise ValueError(f"register_env: invalid env name {name!r} (non-empty, without ':')")
    if not overwrite and (name in _REGISTERED or name in _builtin_factories()):
        raise ValueError(f"register_env: env {name!r} is already {get_env(name).source}; pass overwrite=True to "
                         "replace it")
    if from_row is None and dataset_builder is not None:
        from_row = getattr(dataset_builder, "from_row", None)
    if description is None:
        description = _first_line(dataset_builder) or _first_line(from_row)
    kind = EnvKind(name, description, dataset_builder, from_row, "registered")
    _REGISTERED[name] = kind
    return kind


def unregister_env(name: str) -> None:
    """Remove a kind added with :func:`register_env` (built-in and entry-point envs cannot be removed)."""
    if name not in _REGISTERED:
        raise KeyError(f"unregister_env: {name!r} was not registered with register_env")
    del _REGISTERED[name]


def get_env(name: str, *, allow_import: bool = True) -> EnvKind:
    """The :class:`EnvKind` called ``name``.

    ``"package.module:attr"`` imports ``attr`` (an ``EnvKind`` or a dataset-builder factory) unless ``allow_import``
    is false. Raises :class:`UnknownEnvError` (a ``KeyError``) naming the known envs when there is no such env.
    """
    if name in _REGISTERED:
        return _REGISTERED[name]
    builtins = _builtin_factories()
    if name in builtins:
        return EnvKind.from_factory(name, builtins[name], "builtin")
    if ":" in name:
        if not allow_import:
            raise UnknownEnvError(f"env {name!r}: 'module:attr' references are not allowed here; known envs: "
                           f"{sorted(_known_names())}")
        return _import_kind(name)
    kind = _entry_point_kind(name, rescan=False) or _entry_point_kind(name, rescan=True)
    if kind is None:
        raise UnknownEnvError(f"unknown env {name!r}; known envs: {sorted(_known_names())} (built in, registered with "
                       f"register_env, or installed under the entry-point group {ENTRY_POINT_GROUP!r})")
    return kind


def list_envs() -> dict[str, str]:
    """All env names, sorted, with a one-line description each (entry points rescanned; a plugin that fails to load
    is listed with the error instead of its description). :func:`get_env` tells what a kind can do."""
    _scan_entry_points()
    out: dict[str, str] = {}
    for name in sorted(_known_names()):
        try:
            out[name] = get_env(name).description
        except Exception as e:  # a broken plugin must not hide the others
            out[name] = f"(failed to load: {type(e).__name__}: {e})"
    return out


def make_env_dataset(name: str, renderer: Renderer, *, group_size: int | None = None,
                     groups_per_batch: int | None = None, num_batches: int | None = None,
                     defaults: Mapping[str, Any] | None = None, **env_kwargs: Any) -> RLDatasetBuilder | RLDataset:
    """The training envs of env ``name`` by name: its dataset-builder factory called with ``renderer`` and
    ``env_kwargs``, plus ``group_size`` / ``batch_size`` (= ``groups_per_batch``) / ``num_batches`` when given and
    accepted by the factory's signature (so a user factory ``f(renderer, **my_options)`` keeps working). ``defaults``
    are further options offered the same way (only where accepted; ``env_kwargs`` win over them), e.g. a seed or a
    test-set size that an evaluation offers to any env.

    Raises:
        UnknownEnvError: unknown env. ValueError: the env has only a row spec. TypeError: the factory returned something
        other than an ``RLDataset`` / ``RLDatasetBuilder``.
    """
    kind = get_env(name)
    if kind.dataset_builder is None:
        raise ValueError(f"env {name!r} ({kind.source}) trains only from row specs: build a datasets.Dataset of "
                         f"{{'{ENV_FIELD}': '{name}', ...}} rows and pass it as the env dataset (--env_dataset)")
    offered = {"group_size": group_size, "batch_size": groups_per_batch, "num_batches": num_batches,
               **(defaults or {})}
    accepted = _accepted_kwargs(kind.dataset_builder)
    kwargs = {k: v for k, v in offered.items() if v is not None and (accepted is None or k in accepted)}
    out = kind.dataset_builder(renderer=renderer, **{**kwargs, **env_kwargs})
    if not isinstance(out, (RLDataset, RLDatasetBuilder)):
        raise TypeError(f"env {name!r} ({kind.source}): its factory returned {type(out).__name__}, not an RLDataset "
                        "or RLDatasetBuilder")
    return out


def make_env_group_builder(row: Mapping[str, Any], renderer: Renderer, group_size: int, *,
                           index: int | None = None) -> EnvGroupBuilder:
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
        raise EnvRowError(f"{_where(index)}: env {name!r} rejected the row {dict(fields)}: {e}") from e
    if not isinstance(builder, EnvGroupBuilder):
        raise TypeError(f"env {name!r} ({kind.source}): from_row returned {type(builder).__name__}, not an "
                        "EnvGroupBuilder")
    return builder


def validate_row(row: Mapping[str, Any], *, index: int | None = None) -> tuple[str, dict[str, Any]]:
    """Check one row spec against its env kind without building anything; return ``(env name, fields)`` with
    defaults left out, ``None`` values dropped and integral floats of ``int`` fields made ``int``.

    Raises:
        EnvRowError: as :func:`make_env_group_builder`.
    """
    where = _where(index)
    if not isinstance(row, Mapping):
        raise EnvRowError(f"{where}: a row spec is a mapping like {{'{ENV_FIELD}': 'arithmetic', 'a': 2, 'b': 3}}, got "
                          f"{type(row).__name__}")
    name = row.get(ENV_FIELD)
    if name is None and ENV_FIELD in row:
        raise EnvRowError(f"{where}, field {ENV_FIELD!r}: the env name is null; every row needs the name of its env "
                          f"kind, e.g. {{'{ENV_FIELD}': 'arithmetic', ...}} (a mixed dataset written with missing "
                          f"'{ENV_FIELD}' values gets nulls there)")
    if name is None:
        raise EnvRowError(f"{where}: missing field {ENV_FIELD!r} (the env kind); fields present: {sorted(row)}")
    if not isinstance(name, str):
        raise EnvRowError(f"{where}, field {ENV_FIELD!r}: expected an env name (str), got {name!r}")
    try:
        kind = get_env(name, allow_import=False)
    except KeyError:
        by_name_only = sorted(_known_names() - set(_row_kinds()))
        raise EnvRowError(f"{where}, field {ENV_FIELD!r}: unknown env kind {name!r}; env kinds with row specs: "
                          f"{_row_kinds()}" + (f" (by name only: {by_name_only})" if by_name_only else "")) from None
    if kind.from_row is None:
        raise EnvRowError(f"{where}, field {ENV_FIELD!r}: env {name!r} ({kind.source}) has no row spec (no from_row), "
                          f"so it trains by name only (--env_name {name}); env kinds with row specs: {_row_kinds()}")
    spec = kind.row_fields
    given = {k: v for k, v in row.items() if k != ENV_FIELD and v is not None}
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise EnvRowError(f"{where}, field {unknown[0]!r}: env {name!r} takes no field {unknown[0]!r}; its fields are "
                          f"{_describe_fields(spec)} (drop other columns with dataset.remove_columns)")
    missing = [k for k, (_, default) in spec.items() if default is inspect.Parameter.empty and k not in given]
    if missing:
        raise EnvRowError(f"{where}, field {missing[0]!r}: missing required field {missing[0]!r} of env {name!r}; its "
                          f"fields are {_describe_fields(spec)}")
    fields = {}
    for key, value in given.items():
        expected = spec[key][0]
        ok, value = _coerce(value, expected)
        if not ok:
            raise EnvRowError(f"{where}, field {key!r}: env {name!r} expects {_type_name(expected)}, got "
                              f"{value!r} ({type(value).__name__})")
        fields[key] = value
    return name, fields


# -- internals ---------------------------------------------------------------------------------------------------


def _builtin_factories() -> dict[str, Any]:
    from ..envs import BUILTIN_ENVS  # read at each lookup: other modules may add entries

    return BUILTIN_ENVS


def _known_names() -> set[str]:
    return set(_REGISTERED) | set(_builtin_factories()) | set(_scan_entry_points(rescan=False))


def _row_kinds() -> list[str]:
    out = []
    for name in sorted(_known_names()):
        try:
            if get_env(name).from_row is not None:
                out.append(name)
        except Exception:  # a broken plugin: reported by get_env when asked for by name
            continue
    return out


def _scan_entry_points(rescan: bool = True) -> dict[str, metadata.EntryPoint]:
    global _ENTRY_POINTS
    if _ENTRY_POINTS is None or rescan:
        found: dict[str, metadata.EntryPoint] = {}
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in found and found[ep.name].value != ep.value:
                warnings.warn(f"env {ep.name!r} is declared by two entry points ({found[ep.name].value} and "
                              f"{ep.value}); using the first", stacklevel=3)
                continue
            found.setdefault(ep.name, ep)
        _ENTRY_POINTS = found
    return _ENTRY_POINTS


def _entry_point_kind(name: str, rescan: bool) -> EnvKind | None:
    ep = _scan_entry_points(rescan=rescan).get(name)
    if ep is None:
        return None
    cached = _LOADED_ENTRY_POINTS.get(name)
    if cached is not None and cached.source == _ep_source(ep):
        return cached
    try:
        obj = ep.load()
    except Exception as e:
        raise ImportError(f"env {name!r}: loading entry point {ep.value!r} ({_ep_source(ep)}) failed: "
                          f"{type(e).__name__}: {e}") from e
    kind = EnvKind.from_factory(name, obj, _ep_source(ep))
    _LOADED_ENTRY_POINTS[name] = kind
    return kind


def _ep_source(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"entry point of {dist.name} {dist.version}" if dist is not None else f"entry point {ep.value}"


def _import_kind(ref: str) -> EnvKind:
    module_name, _, attr = ref.partition(":")
    try:
        obj = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise UnknownEnvError(f"env {ref!r}: cannot import {attr!r} from module {module_name!r}: {e}") from e
    from ..tinker.detect import is_tinker_cookbook_object  # imports nothing of tinker

    if is_tinker_cookbook_object(obj):  # a tinker-cookbook builder or dataset: adapted (trl_envs/tinker/)
        from ..tinker.registry import env_kind

        return env_kind(ref, obj)
    return EnvKind.from_factory(ref, obj, "import")


def _row_fields(from_row: Callable[..., Any]) -> dict[str, tuple[Any, Any]]:
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
    return {p.name: (hints.get(p.name), p.default) for p in params[2:]
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


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


def _first_line(obj: Any) -> str:
    doc = getattr(obj, "__doc__", None) if obj is not None else None  # own docstring only, not a base class's
    return inspect.cleandoc(doc).strip().splitlines()[0].strip() if isinstance(doc, str) and doc.strip() else ""


def _accepted_kwargs(fn: Callable[..., Any]) -> set[str] | None:
    """Keyword names ``fn`` accepts, or ``None`` if it takes ``**kwargs`` (or has no readable signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


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
