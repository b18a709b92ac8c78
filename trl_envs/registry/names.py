"""The env registry: env kinds by name (registered, built in, from entry points), and what each can do.

Row specs and their validation live in :mod:`trl_envs.registry.rows`, ``--env_kwargs`` parsing in
:mod:`trl_envs.registry.env_kwargs`; :mod:`trl_envs.registry` exports all of them.

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
   ``from_row`` attribute; its description is the first paragraph of its docstring);
3. other installed packages, through the entry-point group ``trl_envs.envs`` (see :data:`ENTRY_POINT_GROUP`),
   read lazily with :mod:`importlib.metadata` (cached, and read again whenever a name is found neither above nor in
   the cache, and by :func:`list_envs`);
4. families of names served by an adapter of another library (:data:`PREFIXED_ENVS`: ``reasoning_gym/<task>``,
   ``textarena/<game>``, ``pettingzoo/<family>/<game>``, ``skyrl_gym/<env>``), resolved by the adapter when such a
   name is asked for and listed by :func:`list_envs` when the library is installed;
5. for training by name only, ``"package.module:attr"``, imported on demand (never for rows: a dataset cannot make
   trl_envs import code).

Row format, errors and design: docs/envs_as_datasets.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from typing import Any

from ..core.renderer import Renderer
from ..core.types import EnvGroupBuilder, RLDataset, RLDatasetBuilder
from .env_kwargs import EnvOptionError
from .signatures import accepted_kwargs, row_fields

ENTRY_POINT_GROUP = "trl_envs.envs"
"""Packages ship envs with an entry point in this group: the name is the env name, the object is an
:class:`EnvKind` or a dataset-builder factory (optionally with a ``from_row`` attribute). In ``pyproject.toml``::

    [project.entry-points."trl_envs.envs"]
    my_env = "my_package.envs:MY_ENV"
"""

ENV_FIELD = "env"
"""The row field naming the env kind (row specs: :mod:`trl_envs.registry.rows`)."""

PREFIXED_ENVS: dict[str, tuple[str, str]] = {
    "reasoning_gym/": ("reasoning_gym", "trl_envs.reasoning_gym.registry"),
    "textarena/": ("textarena", "trl_envs.textarena.registry"),
    "pettingzoo/": ("pettingzoo", "trl_envs.pettingzoo.registry"),
    "skyrl_gym/": ("skyrl_gym", "trl_envs.skyrl_gym.registry"),
    "verifiers/": ("verifiers", "trl_envs.verifiers.registry"),
}
"""Env-name families of the ecosystem adapters (docs/ecosystem.md): prefix -> (the package the adapter needs, the
adapter module). The module defines ``env_kind(name) -> EnvKind`` (raising :class:`UnknownEnvError` with the closest
names for an unknown one) and ``env_names() -> dict[str, str]`` (name -> description); it is imported only when a
name with its prefix is looked up or listed."""

IMPORTED_OBJECT_ADAPTERS: dict[str, str] = {"tinker_cookbook": "trl_envs.tinker.registry"}
"""Libraries whose objects an adapter turns into env kinds (``--env package.module:attr``): the top-level package
that defines one of the imported object's classes (its own or a base class) -> the adapter module. The module defines
``imported_env_kind(ref, obj) -> EnvKind | None`` (``None``: not an object it adapts); it is imported only when such
an object is imported. The registry finds adapters by name, so it imports none of them."""


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
            raise ValueError(
                f"EnvKind {self.name!r}: give a dataset_builder (train by name), a from_row (train from "
                "row specs), or both"
            )

    @property
    def row_fields(self) -> dict[str, tuple[Any, Any]]:
        """The row's fields: ``{field: (type or None, default or inspect.Parameter.empty)}``; empty without rows."""
        return row_fields(self.from_row) if self.from_row is not None else {}

    @classmethod
    def from_factory(cls, name: str, factory: Any, source: str) -> EnvKind:
        """The kind of a :data:`~trl_envs.envs.BUILTIN_ENVS`-style factory (or an ``EnvKind``, renamed)."""
        if isinstance(factory, EnvKind):
            return replace(factory, name=name, source=source)
        if not callable(factory):
            raise TypeError(
                f"env {name!r} ({source}): expected an EnvKind or a callable dataset-builder factory, got "
                f"{type(factory).__name__}"
            )
        return cls(name, _first_line(factory), factory, getattr(factory, "from_row", None), source)


_REGISTERED: dict[str, EnvKind] = {}
_ENTRY_POINTS: dict[str, metadata.EntryPoint] | None = None  # read lazily
_LOADED_ENTRY_POINTS: dict[str, EnvKind] = {}


def register_env(
    name: str,
    dataset_builder: Callable[..., RLDatasetBuilder | RLDataset] | None = None,
    *,
    from_row: Callable[..., EnvGroupBuilder] | None = None,
    description: str | None = None,
    overwrite: bool = False,
) -> EnvKind:
    """Register an env kind under ``name`` for this process and return it.

    Args:
        name: the env name (no ``:``, which marks ``module:attr`` references).
        dataset_builder: ``factory(renderer=..., **kwargs)`` returning an ``RLDatasetBuilder`` or ``RLDataset`` (train
            by name). Its ``from_row`` attribute, if any, is used when ``from_row`` is not given.
        from_row: ``from_row(renderer, group_size, **fields)`` returning the ``EnvGroupBuilder`` of one row spec.
        description: one line for :func:`list_envs` (default: the first paragraph of the factory's or
            from_row's docstring).
        overwrite: replace an existing registration (otherwise registering a taken name raises).

    Raises:
        ValueError: the name is taken (registered or built in) and ``overwrite`` is false, or neither capability is
            given. (A registered name shadows an installed env of the same name.)
    """
    if not name or ":" in name:
        raise ValueError(f"register_env: invalid env name {name!r} (non-empty, without ':')")
    if not overwrite and (name in _REGISTERED or name in _builtin_factories()):
        raise ValueError(
            f"register_env: env {name!r} is already {get_env(name).source}; pass overwrite=True to replace it"
        )
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
    prefixed = _prefixed_kind(name)
    if prefixed is not None:
        return prefixed
    if ":" in name:
        if not allow_import:
            raise UnknownEnvError(
                f"env {name!r}: 'module:attr' references are not allowed here; known envs: {sorted(known_env_names())}"
            )
        return _import_kind(name)
    kind = _entry_point_kind(name, rescan=False) or _entry_point_kind(name, rescan=True)
    if kind is None:
        import difflib

        known = sorted(known_env_names())
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UnknownEnvError(
            f"unknown env {name!r}; {hint}known envs: {known} (built in, registered with "
            f"register_env, or installed under the entry-point group {ENTRY_POINT_GROUP!r})"
        )
    return kind


def list_envs(prefixed: bool = True) -> dict[str, str]:
    """All env names, sorted, with a one-line description each (entry points rescanned; a plugin that fails to load
    is listed with the error instead of its description), then with ``prefixed`` the names of each
    :data:`PREFIXED_ENVS` family whose library is installed. :func:`get_env` tells what a kind can do."""
    _scan_entry_points()
    out: dict[str, str] = {}
    for name in sorted(known_env_names()):
        try:
            out[name] = get_env(name).description
        except Exception as e:  # a broken plugin must not hide the others
            out[name] = f"(failed to load: {type(e).__name__}: {e})"
    if prefixed:
        for prefix, (package, module) in PREFIXED_ENVS.items():
            if importlib.util.find_spec(package) is None:
                continue
            try:
                out.update(sorted(importlib.import_module(module).env_names().items()))
            except Exception as e:  # a broken install must not hide the others
                out[prefix + "*"] = f"(failed to load: {type(e).__name__}: {e})"
    return out


def make_env_dataset(
    name: str,
    renderer: Renderer,
    *,
    group_size: int | None = None,
    groups_per_batch: int | None = None,
    num_batches: int | None = None,
    defaults: Mapping[str, Any] | None = None,
    **env_kwargs: Any,
) -> RLDatasetBuilder | RLDataset:
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
        raise ValueError(
            f"env {name!r} ({kind.source}) trains only from row specs: build a datasets.Dataset of "
            f"{{'{ENV_FIELD}': '{name}', ...}} rows and pass it as the env dataset (--env_dataset)"
        )
    offered = {"group_size": group_size, "batch_size": groups_per_batch, "num_batches": num_batches, **(defaults or {})}
    accepted = accepted_kwargs(kind.dataset_builder)
    kwargs = {k: v for k, v in offered.items() if v is not None and (accepted is None or k in accepted)}
    try:
        out = kind.dataset_builder(renderer=renderer, **{**kwargs, **env_kwargs})
    except TypeError as e:
        unknown = sorted(set(env_kwargs) - accepted) if accepted is not None else []
        if unknown and not isinstance(e, EnvOptionError):  # Python's "unexpected keyword argument": say it plainly
            raise EnvOptionError(
                f"env {name!r} ({kind.source}) takes no option {unknown[0]!r}; its options are "
                f"{sorted(accepted - {'renderer'})}"
            ) from e
        raise
    if not isinstance(out, (RLDataset, RLDatasetBuilder)):
        raise TypeError(
            f"env {name!r} ({kind.source}): its factory returned {type(out).__name__}, not an RLDataset "
            "or RLDatasetBuilder"
        )
    try:
        setattr(out, ENV_NAME_ATTRIBUTE, name)  # so that messages name the env as the user wrote it
    except (AttributeError, TypeError):  # a frozen or slotted object: messages fall back to its logging tags
        pass
    return out


ENV_NAME_ATTRIBUTE = "trl_envs_env_name"
"""The attribute :func:`make_env_dataset` sets on what it returns: the env's name as the user wrote it."""


def env_label(envs: Any, builder: EnvGroupBuilder | None = None) -> str:
    """How messages name the envs a trainer was given: the name the user wrote (``verifiers/vf_sums``,
    ``textarena/Nim-v0``) when :func:`make_env_dataset` made them, else the first group's first logging tag, else the
    class of the group (or of ``envs``)."""
    name = getattr(envs, ENV_NAME_ATTRIBUTE, None)
    if isinstance(name, str) and name:
        return name
    if builder is not None:
        tags = [tag for tag in builder.logging_tags() if tag != "all"]
        return tags[0] if tags else type(builder).__name__
    return type(envs).__name__


# -- internals ---------------------------------------------------------------------------------------------------


def unknown_prefixed_name(name: str, family: str, known: list[str]) -> UnknownEnvError:
    """The error for a name of a :data:`PREFIXED_ENVS` family that its library does not have: the closest known
    names, and how to list them all."""
    import difflib

    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    return UnknownEnvError(
        f"unknown env {name!r}: {family} has no such name{hint} (`trl-envs list` lists all {len(known)})"
    )


def _prefixed_kind(name: str) -> EnvKind | None:
    """The kind of a :data:`PREFIXED_ENVS` name, ``None`` for other names; an ``ImportError`` with the install line
    when the family's library is missing."""
    for prefix, (package, module) in PREFIXED_ENVS.items():
        if name.startswith(prefix):
            if importlib.util.find_spec(package) is None:
                raise ImportError(
                    f"env {name!r} needs the {package} package: pip install "
                    f"'trl-envs[{package.replace('_', '-')}]' "
                    "(docs/ecosystem.md)"
                )
            return importlib.import_module(module).env_kind(name)
    return None


def _builtin_factories() -> dict[str, Any]:
    from ..envs import BUILTIN_ENVS  # read at each lookup: other modules may add entries

    return BUILTIN_ENVS


def known_env_names() -> set[str]:
    """Every env name known now: registered, built in, or from entry points already read (no rescan)."""
    return set(_REGISTERED) | set(_builtin_factories()) | set(_scan_entry_points(rescan=False))


def forget_entry_points() -> None:
    """Forget the entry points read so far; the next lookup reads them again (for code that changes ``sys.path``)."""
    global _ENTRY_POINTS
    _ENTRY_POINTS = None
    _LOADED_ENTRY_POINTS.clear()


def _scan_entry_points(rescan: bool = True) -> dict[str, metadata.EntryPoint]:
    global _ENTRY_POINTS
    if _ENTRY_POINTS is None or rescan:
        found: dict[str, metadata.EntryPoint] = {}
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in found and found[ep.name].value != ep.value:
                warnings.warn(
                    f"env {ep.name!r} is declared by two entry points ({found[ep.name].value} and "
                    f"{ep.value}); using the first",
                    stacklevel=3,
                )
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
        raise ImportError(
            f"env {name!r}: loading entry point {ep.value!r} ({_ep_source(ep)}) failed: {type(e).__name__}: {e}"
        ) from e
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
    cls = obj if isinstance(obj, type) else type(obj)
    packages = dict.fromkeys(base.__module__.split(".")[0] for base in getattr(cls, "__mro__", (cls,)))
    for package in packages:
        adapter = IMPORTED_OBJECT_ADAPTERS.get(package)
        if adapter is not None:
            kind = importlib.import_module(adapter).imported_env_kind(ref, obj)
            if kind is not None:
                return kind
    return EnvKind.from_factory(ref, obj, "import")


def _first_line(obj: Any) -> str:
    """The docstring's summary (its first paragraph, on one line: a summary wrapped over two lines stays whole)."""
    doc = getattr(obj, "__doc__", None) if obj is not None else None  # own docstring only, not a base class's
    if not isinstance(doc, str) or not doc.strip():
        return ""
    return " ".join(inspect.cleandoc(doc).strip().split("\n\n")[0].split())
