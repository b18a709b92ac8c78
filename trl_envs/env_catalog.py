"""The envs the command line and the training scripts know by name: built-in envs, or ``package.module:factory``.

This is the one place that lists env names (``trl-envs list``) and turns a name into an env dataset; switch it to a
registry without touching its callers.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from .renderer import Renderer
from .types import RLDataset, RLDatasetBuilder


def available_envs() -> dict[str, str]:
    """``{name: one-line description}`` of the envs that can be named on the command line."""
    from .envs import BUILTIN_ENVS

    return {name: _describe(name, factory) for name, factory in sorted(BUILTIN_ENVS.items())}


def make_env_dataset(name: str, renderer: Renderer, env_kwargs: dict[str, Any] | None = None,
                     **defaults: Any) -> RLDataset | RLDatasetBuilder:
    """The env dataset (builder) called ``name``: a built-in env, or ``package.module:factory``, a callable taking
    ``renderer=`` and keyword options and returning an ``RLDataset`` or ``RLDatasetBuilder``.

    ``env_kwargs`` (the user's options) are all passed on; ``defaults`` (e.g. ``group_size``, offered by a caller to
    any env) only where the factory accepts them, and ``env_kwargs`` wins over them. The factory's own errors (e.g.
    an unknown option in ``env_kwargs``) are not caught.

    Raises:
        ValueError: for an unknown built-in name (the known names are listed).
        TypeError: when a ``module:factory`` returns something else than an env dataset.
    """
    if ":" in name:
        module, _, attr = name.partition(":")
        factory = getattr(importlib.import_module(module), attr)
    else:
        from .envs import BUILTIN_ENVS

        if name not in BUILTIN_ENVS:
            raise ValueError(f"Unknown env {name!r}; available envs are: {sorted(BUILTIN_ENVS)} "
                             "(or give 'package.module:factory')")
        factory = BUILTIN_ENVS[name]
    envs = factory(renderer=renderer, **{**accepted_kwargs(factory, defaults), **(env_kwargs or {})})
    if not isinstance(envs, (RLDataset, RLDatasetBuilder)):
        raise TypeError(f"env {name!r}: its factory returned {type(envs).__name__}, not an RLDataset or "
                        "RLDatasetBuilder")
    return envs


def accepted_kwargs(factory: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The items of ``kwargs`` that ``factory`` accepts as keyword arguments (all of them if it takes ``**kwargs``)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # no signature to read: pass everything and let the factory complain
        return dict(kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(kwargs)
    names = {p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                  inspect.Parameter.KEYWORD_ONLY)}
    return {k: v for k, v in kwargs.items() if k in names}


def _describe(name: str, factory: Any) -> str:
    """The first line of the env module's docstring (else the factory's), without reST markup."""
    module = inspect.getmodule(factory)
    doc = (module.__doc__ if module is not None and module.__doc__ else inspect.getdoc(factory)) or ""
    line = doc.strip().splitlines()[0] if doc.strip() else ""
    line = line.replace("``", "")
    return line[len(name) + 1:].strip() if line.startswith(f"{name}:") else line
