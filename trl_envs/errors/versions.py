"""Whether the installed TRL, transformers, torch and the rest are versions ``trl_envs`` works with.

The ranges are read from the installed package's own metadata (``importlib.metadata.requires("trl-envs")``, which is
``pyproject.toml``'s ``dependencies`` as installed), so pyproject stays the one place that declares them; the versions
found are read from each package's metadata too, without importing it (an import of a mismatched TRL can fail on its
own, with a traceback). docs/versions.md lists the floors and the newest versions tested.

:func:`check_installed_versions` raises :class:`IncompatibleVersionError` whose message is one line: the package,
the version found, the range that works and the pip line that installs it. The trainers (``import
trl_envs.trainers``, ``from trl_envs import EnvGRPOTrainer``), the training scripts and ``python -m trl_envs`` run
it before anything of TRL's loads; a process that does not catch the error prints that line alone, with no
traceback, and exits with :data:`EXIT_STATUS` (see :func:`one_line_if_uncaught`). ``TRL_ENVS_SKIP_VERSION_CHECK=1``
skips the check (for trying a release the ranges do not admit yet: docs/versions.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "trl-envs"
"""The distribution whose declared dependencies are the ranges checked."""
SKIP_ENV = "TRL_ENVS_SKIP_VERSION_CHECK"
"""Set to ``1`` to skip the check."""
EXIT_STATUS = 2
"""The exit status of a process that ends on an :class:`IncompatibleVersionError` (a plain mistake's status)."""


class IncompatibleVersionError(ImportError):
    """An installed dependency is outside the range ``trl_envs`` declares (or missing); the message is one line
    naming the package, the version found, the range that works and the pip line that installs it."""

    def __init__(self, mismatches: Iterable[Mismatch]):
        self.mismatches = tuple(mismatches)
        super().__init__(incompatible_message(self.mismatches))


@dataclass(frozen=True)
class Mismatch:
    """One dependency outside its range: its name as declared, the version found (``None``: not installed) and the
    requirement that works (``"trl>=1.16,<1.17"``)."""

    package: str
    found: str | None
    requirement: str

    @property
    def range(self) -> str:
        """The range alone (``>=1.16,<1.17``)."""
        return self.requirement[len(self.package) :]


def declared_requirements(distribution: str = DISTRIBUTION) -> list[tuple[str, str]] | None:
    """``(package, requirement)`` for each dependency ``distribution`` declares outside any extra (``("trl",
    "trl>=1.16,<1.17")``), ranges sorted lowest bound first; ``None`` when ``distribution`` is not installed (a source
    tree on ``sys.path`` has no metadata to read)."""
    from packaging.requirements import Requirement

    try:
        lines = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return None
    out = []
    for line in lines:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue  # an extra's dependency, or one for another platform
        specifiers = sorted(requirement.specifier, key=lambda s: (s.operator not in (">=", ">", "=="), str(s)))
        out.append((requirement.name, requirement.name + ",".join(str(s) for s in specifiers)))
    return out


def installed_version(package: str) -> str | None:
    """The installed version of ``package`` read from its metadata (no import), or ``None``."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def find_mismatches(
    requirements: Iterable[tuple[str, str]], version_of: Callable[[str], str | None] = installed_version
) -> list[Mismatch]:
    """The requirements ``version_of`` finds unmet (not installed, or a version outside the range). A local version
    label (``2.13.0+cpu``) counts as its release; pre-releases are compared as any version."""
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version

    out = []
    for package, line in requirements:
        found = version_of(package)
        specifier = Requirement(line).specifier
        try:
            ok = found is not None and specifier.contains(Version(found), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            out.append(Mismatch(package, found, line))
    return out


def incompatible_message(mismatches: Iterable[Mismatch]) -> str:
    """One line: what was found, what works, and the pip line that installs what works."""
    mismatches = list(mismatches)
    found = ", ".join(f"{m.package} {m.found}" if m.found else f"no {m.package}" for m in mismatches)
    needs = ", ".join(m.requirement for m in mismatches)
    pip_line = "pip install " + " ".join(f'"{m.requirement}"' for m in mismatches)
    return f"trl_envs works with {needs}; found {found}. Install what works: {pip_line}"


def check_installed_versions(
    distribution: str = DISTRIBUTION, version_of: Callable[[str], str | None] = installed_version
) -> None:
    """Raise :class:`IncompatibleVersionError` if a dependency ``distribution`` declares is missing or outside its
    range (every one found is named in the one line). Does nothing when ``distribution`` is not installed or
    :data:`SKIP_ENV` is set. Also arranges that the error, if nothing catches it, ends the process with its line
    alone (:func:`one_line_if_uncaught`)."""
    if os.environ.get(SKIP_ENV, "") not in ("", "0"):
        return
    requirements = declared_requirements(distribution)
    if requirements is None:
        return
    mismatches = find_mismatches(requirements, version_of)
    if mismatches:
        error = IncompatibleVersionError(mismatches)
        one_line_if_uncaught()
        raise error


def program_name(argv0: str | None = None) -> str:
    """The name a command's error lines start with: the script's file name (``train_grpo.py``), ``trl-envs`` for
    ``python -m trl_envs``, ``python`` for an interactive session."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if not argv0 or argv0 == "-c":
        return "python"
    path = Path(argv0)
    if path.name == "__main__.py":
        return path.parent.name.replace("_", "-")
    return path.name


def one_line_if_uncaught() -> None:
    """Make an :class:`IncompatibleVersionError` that no code catches print ``<program>: error: <its line>`` alone
    on stderr and exit with :data:`EXIT_STATUS`, instead of a traceback through the imports that raised it. Any other
    uncaught error goes to the previous ``sys.excepthook`` unchanged."""
    previous = sys.excepthook
    if getattr(previous, "incompatible_versions_hook", False):
        return

    def hook(kind, value, traceback):
        if not isinstance(value, IncompatibleVersionError):
            previous(kind, value, traceback)
            return
        if os.environ.get("TRL_ENVS_TRACEBACK", "") not in ("", "0"):
            previous(kind, value, traceback)
        print(f"{program_name()}: error: {value}", file=sys.stderr, flush=True)
        sys.exit(EXIT_STATUS)  # SystemExit raised by the hook sets the status (CPython handles it there)

    hook.incompatible_versions_hook = True
    sys.excepthook = hook


__all__ = [
    "DISTRIBUTION",
    "EXIT_STATUS",
    "SKIP_ENV",
    "IncompatibleVersionError",
    "Mismatch",
    "check_installed_versions",
    "declared_requirements",
    "find_mismatches",
    "incompatible_message",
    "installed_version",
    "one_line_if_uncaught",
    "program_name",
]
