"""No module of trl_envs reaches into a private name that another of its modules defines.

A private name (``_x``, not a dunder) is an implementation detail of the module that defines it: a method, a class
attribute, or an attribute a class sets on ``self``. Inside that module other code may use it (a class's helpers, a
module's own classes working together); from another module it is reached only through a public name, so changing a
private never breaks a caller elsewhere. Checked on the source (``ast``): every ``obj._x`` whose object is not
``super()`` or a module of another library (``os._exit``), where ``_x`` is defined by some module of the package and
not by the module using it -- ``self._x`` included: a mixin or subclass calling a private its class does not define
reaches into another module as much as ``trainer._x`` does. Private names of other libraries (argparse's
``parser._actions``) are not this test's concern, and ``trainers/trl_seam.py`` is where TRL's are reached (also those
our trainers override): ``tests/test_trl_seam.py`` guards them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import trl_envs

PACKAGE = Path(trl_envs.__file__).resolve().parent


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def defined_privates(tree: ast.AST) -> set[str]:
    """The private names a module defines for objects: functions and methods, class attributes, ``self._x = ...``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _is_private(node.name):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
                names.update(t.id for t in targets if isinstance(t, ast.Name) and _is_private(t.id))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                names.add(node.attr)
    return names


def _super(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _library_modules(tree: ast.AST) -> set[str]:
    """The names a module binds to other libraries' modules (``import os``, ``import numpy as np``)."""
    return {
        alias.asname or alias.name.partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.partition(".")[0] != "trl_envs"
    }


SEAM = "trl_envs/trainers/trl_seam.py"


def cross_module_privates(sources: dict[str, str]) -> list[str]:
    """``"<module>:<line>: <code>"`` for each private name reached in one module that another module defines."""
    trees = {name: ast.parse(text, name) for name, text in sources.items()}
    defined = {name: defined_privates(tree) for name, tree in trees.items()}
    everywhere = set().union(*defined.values()) if defined else set()
    found = []
    for name, tree in trees.items():
        if name == SEAM:
            continue
        libraries = _library_modules(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and _is_private(node.attr)
                and not _super(node.value)
                and not (isinstance(node.value, ast.Name) and node.value.id in libraries)
                and node.attr in everywhere
                and node.attr not in defined[name]
            ):
                owners = sorted(other for other, names in defined.items() if node.attr in names)
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)} (defined in {', '.join(owners)})")
    return found


def package_sources() -> dict[str, str]:
    return {str(path.relative_to(PACKAGE.parent)): path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_module_reaches_into_another_modules_private_names():
    sources = package_sources()
    assert len(sources) > 100
    found = cross_module_privates(sources)
    assert not found, "private names of one module used in another (make them public, or move the code):\n" + "\n".join(
        found
    )


def test_the_check_catches_a_private_call_across_modules_and_allows_one_inside():
    rounds = "def sample(trainer):\n    return trainer._rollout_step(1)\n"
    trainer = (
        "class Trainer:\n"
        "    def _rollout_step(self, x):\n        return self._budget + x\n"
        "    def __init__(self):\n        self._budget = 1\n"
        "def helper(t):\n    return t._budget\n"  # inside the defining module: allowed
    )
    found = cross_module_privates({"rounds.py": rounds, "trainer.py": trainer})
    assert found == ["rounds.py:2: trainer._rollout_step (defined in trainer.py)"]
    mixin = "class Async:\n    def step(self):\n        return self._rollout_step(2)\n"
    assert cross_module_privates({"mixin.py": mixin, "trainer.py": trainer}) == [
        "mixin.py:3: self._rollout_step (defined in trainer.py)"
    ]
    assert cross_module_privates({"a.py": "x = obj._y\n", "b.py": "def f(self):\n    return super()._y\n"}) == []
    library = "import os\ndef stop():\n    os._exit(1)\n"
    assert (
        cross_module_privates({"a.py": library, "b.py": "class S:\n    def __init__(self):\n        self._exit = 0\n"})
        == []
    )
