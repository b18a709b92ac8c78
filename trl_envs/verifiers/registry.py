"""``verifiers/<env-id>`` names as env kinds of the registry.

``<env-id>`` is what ``vf-eval`` takes: an installed environment module (``my-env``, ``owner/my-env@0.1`` as on the
hub) or a taskset built into verifiers. By name, ``--env_kwargs`` holds the taskset's config fields (``num_tasks``
...) next to this adapter's options (:data:`OWN_OPTIONS`); ``taskset`` gives the taskset's fields explicitly (for a
field named like one of the options, e.g. ``seed``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

from ..core.renderer import Renderer
from ..registry.names import EnvKind, UnknownEnvError
from .dataset import VerifiersDatasetBuilder
from .loading import PREFIX, is_importable, module_name, require_verifiers

OWN_OPTIONS = (
    "batch_size",
    "group_size",
    "num_batches",
    "num_test_batches",
    "seed",
    "env_config",
    "test_taskset",
    "num_test_tasks",
    "max_tasks",
    "tag",
    "model",
)
"""``--env_kwargs`` keys of this adapter; ``taskset`` and every other key are the taskset's config."""


def env_kind(name: str) -> EnvKind:
    """The kind of ``verifiers/<env-id>``; :class:`~trl_envs.registry.names.UnknownEnvError` when verifiers cannot
    import that environment."""
    env_id = name[len(PREFIX) :]
    if not env_id or not is_importable(env_id):
        installed = sorted(env_names())
        listed = f"; installed: {', '.join(installed)}" if installed else ""
        raise UnknownEnvError(
            f"unknown env {name!r}: no verifiers environment module {module_name(env_id)!r} is importable (install "
            f"the environment's package, or put its folder on PYTHONPATH){listed}"
        )

    def factory(renderer: Renderer, **options: Any) -> VerifiersDatasetBuilder:
        own = {k: options.pop(k) for k in OWN_OPTIONS if k in options}
        taskset = {**(options.pop("taskset", None) or {}), **options}
        return VerifiersDatasetBuilder(env_id, renderer, taskset=taskset, **own)

    description = f"verifiers environment {env_id}: its own rollout, rubric and metrics"
    factory.__doc__ = description
    return EnvKind(name, description, factory, None, "verifiers")


def env_names() -> dict[str, str]:
    """The verifiers environments installed here: the tasksets built into verifiers, and every installed package
    that depends on ``verifiers`` and whose module of the same name exports a ``Taskset`` (as ``vf-init`` lays an
    environment out). An environment only on ``PYTHONPATH`` trains by name all the same."""
    require_verifiers()
    names: dict[str, str] = {}
    builtin = importlib.util.find_spec("verifiers.v1.tasksets")  # not imported: it imports every built-in taskset
    for info in _iter_modules(builtin.submodule_search_locations or []):
        names[PREFIX + info] = "verifiers built-in taskset"
    for dist in importlib.metadata.distributions():
        requires = dist.requires or []
        if not any(_requirement_name(r) == "verifiers" for r in requires):
            continue
        module = module_name(dist.metadata["Name"] or "")
        if module.isidentifier() and _exports_a_taskset(module):
            names[PREFIX + dist.metadata["Name"]] = f"verifiers environment ({dist.metadata['Name']} {dist.version})"
    return dict(sorted(names.items()))


def _exports_a_taskset(module: str) -> bool:
    """Whether ``module``'s ``__init__`` names a ``Taskset`` (read, not imported: listing imports no environment)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    try:
        with open(spec.origin, encoding="utf-8") as f:
            return "Taskset" in f.read()
    except OSError:
        return False


def _iter_modules(path) -> list[str]:
    import pkgutil

    return [m.name for m in pkgutil.iter_modules(path) if m.ispkg]


def _requirement_name(requirement: str) -> str:
    head = requirement.split(";", 1)[0].strip()
    for stop in "[<>=!~ (":
        head = head.split(stop, 1)[0]
    return head.strip().lower().replace("_", "-")
