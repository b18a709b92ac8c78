"""The package's shape: every public name imports, and no module reaches into another module's private names."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import trl_envs

PACKAGE = Path(trl_envs.__file__).resolve().parent


@pytest.mark.parametrize("name", sorted(trl_envs.__all__))
def test_every_public_name_imports_from_the_package(name):
    namespace: dict = {}
    exec(f"from trl_envs import {name}", namespace)  # the form users write
    assert namespace[name] is getattr(trl_envs, name)


def test_public_names_are_listed_once():
    assert len(trl_envs.__all__) == len(set(trl_envs.__all__))


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private_imports(path: Path) -> list[str]:
    """``from X import _name`` of a trl_envs module X, and imports of a private module (``_builder``) from outside the
    package that holds it. Dunder names (``__version__``) are public."""
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        if source.split(".")[0] != "trl_envs":
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(f"{here}:{node.lineno}: {alias.name} from {source}")
        parts = source.split(".")
        for i, part in enumerate(parts):
            owner = ".".join(parts[:i])
            if part.startswith("_") and not part.startswith("__") and not (here + ".").startswith(owner + "."):
                found.append(f"{here}:{node.lineno}: private module {source}")
    return found


def test_no_module_imports_another_modules_private_name():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 30
    violations = [v for p in modules for v in _private_imports(p)]
    assert not violations, "cross-module private imports (make the name public or move it): " + "; ".join(violations)


def test_the_private_import_check_catches_one(monkeypatch):
    probe = PACKAGE / "rollout" / "engine.py"
    assert _private_imports(probe) == []
    source = (
        probe.read_text() + "\nfrom ..samplers.hf import _LogprobRecorder\nfrom ..envs._builder import BuiltinDataset\n"
    )
    monkeypatch.setattr(Path, "read_text", lambda self: source)  # checked as if it were trl_envs/rollout/engine.py
    assert [v.split(": ", 1)[1] for v in _private_imports(probe)] == [
        "_LogprobRecorder from trl_envs.samplers.hf",
        "private module trl_envs.envs._builder",
    ]


def test_lazy_trainer_names_are_not_imported_with_the_package():
    import subprocess
    import sys

    code = "import sys, trl_envs; print('trl' in sys.modules, 'trl_envs.trainers.grpo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_registry_package_exports_each_job():
    registry = importlib.import_module("trl_envs.registry")
    for name in registry.__all__:
        assert getattr(registry, name) is not None
