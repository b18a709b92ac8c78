"""Every test that imports an optional library skips, with the reason, when that library is missing.

The README's install line installs ``.[test]`` only; the optional adapters (tinker-cookbook, TextArena, PettingZoo,
reasoning-gym, OpenEnv, ...) come with the README's test line. A test module that imports one of them, directly,
through a trl_envs adapter module or through a tests/ helper, must guard it (tests/optional_deps.py): a module-level
``pytest.importorskip``, one in the function that imports it, or a ``needs(...)`` mark. This test reads every test
module (ast, nothing imported) and names each unguarded import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
PACKAGE = ROOT / "trl_envs"

# Distributions whose import name is not the distribution name with "-" -> "_"; None: nothing a test imports.
IMPORT_NAME = {
    "pygame-ce": "pygame",
    "python-dotenv": "dotenv",
    "pytest": None,
    "pytest-timeout": None,
    "pytest-xdist": None,  # a pytest plugin: the conftest hook that imports xdist is called only by pytest-xdist
    "ruff": None,
    "httptools": None,
}
# A guard for the first library covers these (its own dependencies).
IMPLIES = {"tinker_cookbook": {"tinker", "chz", "tml_renderers"}}


def _dist_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower()


def optional_modules() -> set[str]:
    """Import names of every library in an optional extra or in tests/requirements-no-deps.txt that the core
    dependencies do not install."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_dist_name(r) for r in project["dependencies"]}
    dists = {_dist_name(r) for reqs in project["optional-dependencies"].values() for r in reqs}
    no_deps = ROOT / "tests" / "requirements-no-deps.txt"
    for line in no_deps.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            dists.add(_dist_name(line))
    names = {IMPORT_NAME.get(d, d.replace("-", "_")) for d in dists - core}
    return {n for n in names if n}


def _module_of(path: Path, root: Path, prefix: str = "") -> str:
    parts = path.relative_to(root).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(p for p in (prefix, *parts) if p)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        source = _absolute(node, module, is_package)
        return [source] + [f"{source}.{alias.name}" for alias in node.names]
    return []


def _module_level_imports(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    """Imports a module runs when it is imported: top level and top-level ``if`` (not ``if TYPE_CHECKING``), not in
    functions and not in ``try`` blocks that catch the ImportError."""
    found = []
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            continue
        else:
            found.extend(_imports(node, module, is_package))
    return found


def _modules(root: Path, prefix: str) -> dict[str, tuple[Path, ast.Module]]:
    return {
        _module_of(path, root, prefix): (path, ast.parse(path.read_text(encoding="utf-8")))
        for path in root.rglob("*.py")
        if "fixtures" not in path.parts
    }


def needs_at_import() -> dict[str, set[str]]:
    """For each trl_envs module and tests/ helper: the optional libraries that importing it imports (the closure over
    module-level imports, parent packages included)."""
    optional = optional_modules()
    modules = _modules(PACKAGE, "trl_envs") | {
        name: v for name, v in _modules(TESTS, "").items() if not name.startswith("test_")
    }
    direct = {}
    for name, (path, tree) in modules.items():
        direct[name] = set(_module_level_imports(tree, name, path.name == "__init__.py"))
    memo: dict[str, set[str]] = {}

    def closure(name: str, seen: frozenset = frozenset()) -> set[str]:
        if name in memo:
            return memo[name]
        found = set()
        parts = name.split(".")
        for i in range(1, len(parts)):  # importing a.b.c runs a/__init__ and a/b/__init__ first
            parent = ".".join(parts[:i])
            if parent in modules and parent not in seen:
                found |= closure(parent, seen | {name})
        for target in direct.get(name, ()):
            top = target.split(".")[0]
            if top in optional:
                found.add(top)
            elif target in modules and target not in seen:
                found |= closure(target, seen | {name})
        memo[name] = found
        return found

    return {name: closure(name) for name in modules}


def _guarded_by(node: ast.AST) -> set[str]:
    """Libraries a statement, decorator or mark guards: ``pytest.importorskip("x")``, ``needs("x", ...)``."""
    found = set()
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        name = ast.unparse(call.func)
        if name.endswith("importorskip") or name == "needs" or name.endswith(".needs"):
            for arg in call.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    top = arg.value.split(".")[0]
                    found |= {top} | IMPLIES.get(top, set())
    return found


def unguarded_imports(path: Path, requires: dict[str, set[str]], optional: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = path.stem
    aliases: dict[str, set[str]] = {}  # module-level names bound to a guard: needs_x = needs("x")
    module_guards: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.Expr):
            guards = _guarded_by(stmt)
            if isinstance(stmt, ast.Expr) or any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets
            ):
                module_guards |= guards
            elif guards:
                for target in stmt.targets:
                    if isinstance(target, ast.Name):
                        aliases[target.id] = guards

    def guards_of(scope: ast.AST) -> set[str]:
        found = set()
        for decorator in getattr(scope, "decorator_list", []):
            found |= _guarded_by(decorator)
            found |= set().union(*(aliases.get(n.id, set()) for n in ast.walk(decorator) if isinstance(n, ast.Name)))
        if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            for stmt in scope.body:
                found |= _guarded_by(stmt)
        return found

    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    problems = []

    def visit(node: ast.AST, guards: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, guards | guards_of(child))
                continue
            for target in _imports(child, module, False):
                top = target.split(".")[0]
                needed = ({top} & optional) | requires.get(target, set())
                needed -= set().union(*(IMPLIES.get(n, set()) for n in needed))  # name the library to install
                for library in sorted(needed - guards):
                    problems.append(
                        f"{where}:{child.lineno}: imports {target} (needs {library}) without "
                        f'pytest.importorskip("{library}") or needs("{library}") (tests/optional_deps.py)'
                    )
            visit(child, guards)

    visit(tree, module_guards)
    return problems


def test_every_import_of_an_optional_library_in_the_tests_is_guarded():
    optional = optional_modules()
    requires = needs_at_import()
    problems = []
    for path in sorted([*TESTS.glob("test_*.py"), TESTS / "conftest.py"]):  # helpers: through who imports them
        problems += unguarded_imports(path, requires, optional)
    assert not problems, "\n".join(dict.fromkeys(problems))


def test_the_guard_sees_imports_through_adapters_and_helpers():
    requires = needs_at_import()
    assert "tinker_cookbook" in requires["trl_envs.tinker.env"]
    assert "tinker_cookbook" not in requires["trl_envs"]  # import trl_envs stays free of optional libraries
    assert {"textarena", "tinker_cookbook", "reasoning_gym", "openenv", "pettingzoo"} <= optional_modules()


def test_an_unguarded_import_is_reported(tmp_path):
    path = tmp_path / "test_sample.py"
    path.write_text(
        "import pytest\n\n\ndef test_guarded():\n    pytest.importorskip('textarena')\n    import textarena\n\n\n"
        "def test_unguarded():\n    from trl_envs.tinker.env import InitialObservationOverflowError\n"
    )
    problems = unguarded_imports(path, needs_at_import(), optional_modules())
    assert len(problems) == 1 and problems[0].startswith("test_sample.py:10:") and "tinker_cookbook" in problems[0]
