"""Load a verifiers environment the way ``vf-eval`` does: its id (an importable environment module, or a built-in
taskset of verifiers) and its config, through ``vf.resolve_env_config`` and ``vf.load_environment``.

What differs from ``vf-eval``'s defaults, so that an environment runs on the training machine with no account and no
network: every agent role whose author left the runtime at verifiers' default (a remote Prime sandbox) runs in a
local ``subprocess`` runtime, and every role whose harness is unpinned or ``null`` (the plain chat loop) runs the same
chat program with the training interpreter (:mod:`trl_envs.verifiers.harness`). Anything the caller gives for a role
(``{"agent": {"runtime": {"type": "docker"}}}``) wins.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

PREFIX = "verifiers/"


class VerifiersEnvError(ValueError):
    """A verifiers environment that cannot be loaded as given: the message names the env and what is wrong."""


INSTALL = "pip install 'trl-envs[verifiers]'"


def require_verifiers() -> None:
    """Raise :class:`VerifiersEnvError` (one line, with the install command) unless verifiers 0.4's ``verifiers.v1``
    and the ``mcp`` 2 it needs (its built-in tasksets and tool servers import ``mcp.server.mcpserver``) import here."""
    from importlib import metadata

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    try:
        found = importlib.util.find_spec("verifiers.v1") is not None
    except ImportError:
        found = False
    if not found:
        raise VerifiersEnvError(
            f"verifiers environments need verifiers 0.4 (the verifiers.v1 package); this Python has verifiers "
            f"{version('verifiers')}: {INSTALL}"
        )
    try:
        found = importlib.util.find_spec("mcp.server.mcpserver") is not None
    except ImportError:
        found = False
    if not found:
        raise VerifiersEnvError(
            f"verifiers {version('verifiers')} needs mcp 2 (mcp.server.mcpserver); this Python has mcp "
            f"{version('mcp')}: pip install 'mcp==2.0.0' (OpenEnv's client needs mcp<2: keep the two in separate "
            "environments)"
        )


def module_name(env_id: str) -> str:
    """The module verifiers imports for ``env_id`` (``owner/name@version`` -> ``name``, ``-`` -> ``_``, lowercased)."""
    return env_id.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_").lower()


def is_importable(env_id: str) -> bool:
    """Whether verifiers can import the environment ``env_id`` (its built-in tasksets first, then a module)."""
    require_verifiers()
    name = module_name(env_id)
    if not name.isidentifier():
        return False
    for candidate in (f"verifiers.v1.tasksets.{name}", name):
        try:
            if importlib.util.find_spec(candidate) is not None:
                return True
        except ModuleNotFoundError:
            continue
    return False


def env_config(env_id: str, taskset: Mapping[str, Any] | None = None, env: Mapping[str, Any] | None = None):
    """The validated ``vf.EnvConfig`` of ``env_id``: ``taskset`` are its taskset's config fields (``num_tasks`` ...),
    ``env`` the env-level config (its roles by name, ``timeout``, ``id`` of a reusable env to pair it with).

    Raises :class:`VerifiersEnvError` naming the field for a config the environment's config classes reject.
    """
    import verifiers.v1 as vf
    from pydantic import ValidationError
    from verifiers.v1.utils.loaders import env_config_type

    from . import harness

    require_verifiers()
    where = f"verifiers env {env_id!r}"
    data: dict[str, Any] = {**(env or {}), "taskset": {**(taskset or {}), "id": env_id}}
    try:
        config_cls = env_config_type(env_id, str(data.get("id") or ""))
        for role, field in config_cls.model_fields.items():
            default = field.default
            if not isinstance(default, vf.AgentConfig):
                continue
            given = data.get(role)
            if given is not None and not isinstance(given, Mapping):
                raise VerifiersEnvError(f"{where}: role {role!r} must be a mapping of its agent config, got {given!r}")
            given = dict(given or {})
            if "harness" not in given and (default.harness is None or default.harness.id == "null"):
                given["harness"] = {"id": harness.HARNESS_ID}
            if "runtime" not in given and default.runtime.type == "prime":
                given["runtime"] = {"type": "subprocess"}
            data[role] = given
        return vf.resolve_env_config(data)
    except ValidationError as e:
        first = e.errors()[0]
        place = ".".join(str(p) for p in first.get("loc", ())) or "config"
        raise VerifiersEnvError(f"{where}: {place}: {first.get('msg')} (got {first.get('input')!r})") from None
    except (TypeError, AttributeError, ValueError, ImportError) as e:
        if isinstance(e, VerifiersEnvError):
            raise
        raise VerifiersEnvError(f"{where}: {_with_cause(e)}") from e


def load_env(config):
    """``vf.load_environment(config)``, with a loading error named as this env's."""
    import verifiers.v1 as vf

    try:
        return vf.load_environment(config)
    except (TypeError, AttributeError, ValueError, ImportError) as e:
        raise VerifiersEnvError(f"verifiers env {config.env_id!r}: {_with_cause(e)}") from e


def _with_cause(error: BaseException) -> str:
    """The error's message, and its cause's when verifiers re-raised one (a module the environment imports is
    missing: verifiers says the environment was not found, its cause names the module)."""
    cause = error.__cause__
    return f"{error} ({type(cause).__name__}: {cause})" if cause is not None else str(error)
