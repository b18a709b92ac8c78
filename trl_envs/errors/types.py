"""The error types every stage raises for people, and which errors count as plain input mistakes.

* :class:`UsageError`: a plain input mistake (a bad flag, path or file);
* :class:`RunFailed`: a run stopped because it cannot produce a result (the training-health watchdog, non-finite
  rewards, a dead sampler process, a full disk while writing a checkpoint);
* :func:`is_plain_error`: whether an error's message is the whole story, so a command prints it without a traceback
  (:func:`trl_envs.cli.errors.run_command` exits 2 on one, 1 on a :class:`RunFailed`).
"""

from __future__ import annotations

from .versions import IncompatibleVersionError


class UsageError(ValueError):
    """A plain input mistake (a bad flag, path or file): the message says what is wrong and where."""


class RunFailed(RuntimeError):
    """A run that was stopped because it could not produce a result (exit status 1, no model card)."""


def is_plain_error(error: BaseException) -> bool:
    """Whether ``error`` is an input mistake whose message is the whole story (printed without traceback)."""
    if isinstance(error, (ValueError, FileNotFoundError, NotADirectoryError)):  # UsageError, EnvRowError, ...
        return True
    if isinstance(error, KeyError) and type(error).__module__.split(".")[0] == "trl_envs":  # UnknownEnvError
        return True
    if isinstance(error, IncompatibleVersionError):  # a dependency outside pyproject's range: the line says which
        return True
    if isinstance(error, ConnectionError):  # a server that does not answer (an OpenEnv URL): the message names it
        return True
    if isinstance(error, OSError) and "huggingface" in type(error).__module__:  # model/repo not found, offline
        return True
    return type(error).__name__ in (
        "HfHubHTTPError",
        "RepositoryNotFoundError",
        "LocalEntryNotFoundError",
        "OfflineModeIsEnabled",
        "GatedRepoError",
    )


__all__ = ["RunFailed", "UsageError", "is_plain_error"]
