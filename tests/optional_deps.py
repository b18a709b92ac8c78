"""Tests that need an optional library skip, with the reason, when it is not installed.

Two forms, both recognised by tests/test_optional_imports.py (which fails on a test that imports an optional library
without one of them):

* ``pytest.importorskip("textarena")`` at module level (the whole module needs it) or inside the test or fixture
  that imports it;
* ``@needs("textarena", "tinker_cookbook")`` on a test, a class, or as ``pytestmark = needs(...)`` (for tests that only
  start a subprocess that imports it).

The README's test line installs every optional library the suite covers (``.[test,ecosystems]`` plus
tests/requirements-no-deps.txt); a bare ``pip install -e ".[test]"`` runs the rest and skips these.
"""

from __future__ import annotations

import importlib.util

import pytest

INSTALL_HINT = (
    'the README\'s test line installs it: pip install -e ".[test,ecosystems]" '
    "&& pip install --no-deps -r tests/requirements-no-deps.txt"
)


def missing(*modules: str) -> list[str]:
    """The modules of ``modules`` that cannot be imported here."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def needs(*modules: str) -> pytest.MarkDecorator:
    """A mark that skips its test when one of ``modules`` (import names) is not installed, naming them."""
    absent = missing(*modules)
    return pytest.mark.skipif(bool(absent), reason=f"needs {', '.join(absent)} ({INSTALL_HINT})")
