"""House rules a newcomer can run: ``ruff check .`` and ``ruff format --check .`` pass on the whole repository (the
configuration is in pyproject.toml; docs/DESIGN.md, "House rules")."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> list[str]:
    """The ruff command: the ``ruff`` module of this interpreter, else a ``ruff`` on PATH; skip if there is none."""
    try:
        import ruff  # noqa: F401  (the pip package: a binary and a module that finds it)

        return [sys.executable, "-m", "ruff"]
    except ImportError:
        path = shutil.which("ruff")
        if path is None:
            pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
        return [path]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_ruff(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check_passes():
    out = _run("check", ".", "--output-format", "concise")
    assert out.returncode == 0, (
        f"`ruff check .` found problems (fix them; `ruff check --fix` fixes some):\n{out.stdout}"
    )


def test_ruff_format_check_passes():
    out = _run("format", "--check", ".")
    assert out.returncode == 0, f"`ruff format --check .` would reformat (run `ruff format .`):\n{out.stdout}"


def test_ruff_reads_the_projects_configuration():
    """A line of 121 characters in the package is an error (line length 120, from pyproject.toml), so the two tests
    above check the project's rules, not ruff's defaults."""
    probe = ROOT / "trl_envs" / "_layers.py"
    text = "x = '" + "a" * 115 + "'\n"
    out = subprocess.run(
        [*_ruff(), "check", "--stdin-filename", str(probe), "--output-format", "concise", "-"],
        cwd=ROOT,
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert len(text.rstrip("\n")) == 121
    assert out.returncode == 1 and "E501" in out.stdout, out.stdout + out.stderr
