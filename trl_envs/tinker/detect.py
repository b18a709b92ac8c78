"""Recognise tinker-cookbook objects without importing tinker-cookbook.

:func:`is_tinker_cookbook_object` and :func:`cookbook_base` only read class names and modules, so they can be asked
about any object (the registry's hook :func:`trl_envs.tinker.registry.imported_env_kind` does, for objects imported
from ``--env package.module:attr``) without tinker-cookbook installed or imported.
"""

from __future__ import annotations

from typing import Any

COOKBOOK_TYPES_MODULE = "tinker_cookbook.rl.types"
"""Where tinker-cookbook defines ``RLDatasetBuilder``, ``RLDataset`` and ``EnvGroupBuilder``."""

COOKBOOK_BASES = ("RLDatasetBuilder", "RLDataset", "EnvGroupBuilder")


def cookbook_base(obj: Any) -> str | None:
    """The name of the tinker-cookbook base class (``"RLDatasetBuilder"``, ``"RLDataset"`` or ``"EnvGroupBuilder"``)
    that ``obj`` -- a class or an instance -- derives from, or ``None``."""
    cls = obj if isinstance(obj, type) else type(obj)
    for base in getattr(cls, "__mro__", ()):
        if base.__module__ == COOKBOOK_TYPES_MODULE and base.__name__ in COOKBOOK_BASES:
            return base.__name__
    return None


def is_tinker_cookbook_object(obj: Any) -> bool:
    """Whether ``obj`` is a tinker-cookbook ``RLDatasetBuilder`` / ``RLDataset`` / ``EnvGroupBuilder`` (class or
    instance), i.e. something :func:`trl_envs.tinker.adapt` turns into a trl_envs object."""
    return cookbook_base(obj) is not None
