"""The package's layering: its import graph has no circle, and no module imports from a later pipeline stage; the
same holds for folders (the graph of top-level packages), and each folder is in one stage whole.

The graph is read from the source with ``ast`` (every ``import`` and ``from ... import``, at module level and inside
functions, relative and absolute); the stage order is ``trl_envs._layers.STAGES``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

import trl_envs
from trl_envs._layers import STAGES, stage_of

PACKAGE = Path(trl_envs.__file__).resolve().parent


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (its file, whether it is a package ``__init__``)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _imported(node: ast.AST, package: str, modules: dict) -> list[str]:
    """The ``trl_envs`` modules one import statement loads (``from M import x`` loads ``M.x`` when that is a module,
    else ``M``); imports of other packages give nothing."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        names = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
    else:
        return []
    out = []
    for name in names:
        while name and name not in modules:  # `import trl_envs.a.b` of a name inside a module
            name = name.rpartition(".")[0]
        if name:
            out.append(name)
    return out


def import_graph(package: Path, sources: dict[str, str] | None = None) -> dict[str, set[str]]:
    """Module -> the ``trl_envs`` modules it imports anywhere in its code. ``sources`` overrides files' text."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        text = (sources or {}).get(name, None)
        tree = ast.parse(path.read_text() if text is None else text)
        here = name if is_package else name.rpartition(".")[0]
        graph[name] = {m for node in ast.walk(tree) for m in _imported(node, here, modules) if m != name}
    return graph


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (``[a, b, ..., a]``), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module of a later stage, as ``"a (stage) -> b (stage)"``. Importing ``a.b.c`` first runs the
    ``__init__`` of ``a.b``, so what a package's ``__init__`` imports counts as imported by each of its modules (the
    package root ``trl_envs``, the public API that imports every stage, excepted)."""
    out = []
    for module in sorted(graph):
        imported = {(other, module) for other in graph[module]}
        parent = module.rpartition(".")[0]
        while parent.count("."):  # trl_envs.x.y's packages below the root
            imported |= {(other, f"{parent} (its package)") for other in graph.get(parent, ()) if other != module}
            parent = parent.rpartition(".")[0]
        for other, via in sorted(imported):
            if stage_of(other) > stage_of(module):
                out.append(f"{via} ({STAGES[stage_of(module)][0]}) -> {other} ({STAGES[stage_of(other)][0]})")
    return out


def folder_of(module: str) -> str:
    """The folder ``module`` is in: its top-level package under ``trl_envs`` (``trl_envs.cli.errors`` ->
    ``trl_envs.cli``), or itself for a top-level module (``trl_envs.run_defaults``) and for the root ``trl_envs``."""
    return ".".join(module.split(".")[:2])


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Folder -> the other folders its modules import (see :func:`folder_of`)."""
    out: dict[str, set[str]] = defaultdict(set)
    for module, imported in graph.items():
        out[folder_of(module)] |= {folder_of(other) for other in imported} - {folder_of(module)}
    return dict(out)


def split_folders(graph: dict[str, set[str]], stage: Callable[[str], int] = stage_of) -> list[str]:
    """Every folder whose modules are in more than one stage (``stage(module)``: its index in ``STAGES``), as
    ``"folder: stage (module, ...), stage (...)"``."""
    stages: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for module in sorted(graph):
        stages[folder_of(module)][stage(module)].append(module)
    out = []
    for folder, by_stage in sorted(stages.items()):
        if len(by_stage) > 1:
            parts = [f"{STAGES[index][0]} ({', '.join(names)})" for index, names in sorted(by_stage.items())]
            out.append(f"{folder}: " + ", ".join(parts))
    return out


@pytest.fixture(scope="module")
def graph():
    return import_graph(PACKAGE)


def test_the_graph_sees_module_and_function_level_imports(graph):
    assert "trl_envs.core.types" in graph["trl_envs.rollout.engine"]  # module level, relative
    assert "trl_envs.tiny_model" in graph["trl_envs.cli.commands"]  # inside a function
    assert len(graph) > 100


def test_every_module_has_a_stage(graph):
    unplaced = []
    for module in graph:
        try:
            stage_of(module)
        except KeyError:
            unplaced.append(module)
    assert not unplaced, f"modules in no stage of trl_envs._layers.STAGES: {unplaced}"


def test_no_import_circle(graph):
    circle = find_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_no_module_imports_from_a_later_stage(graph):
    violations = upward_imports(graph)
    order = " -> ".join(name for name, _ in STAGES)
    assert not violations, f"imports from a later stage (order: {order}):\n" + "\n".join(violations)


def test_no_folder_import_circle(graph):
    circle = find_circle(folder_graph(graph))
    assert circle is None, "import circle between folders: " + " -> ".join(circle)


def test_every_folder_is_in_one_stage(graph):
    split = split_folders(graph)
    assert not split, "folders whose modules are in different stages (name the folder once in STAGES):\n" + "\n".join(
        split
    )


def test_the_checks_catch_a_circle_and_an_upward_import():
    sources = {
        "trl_envs.core.types": (PACKAGE / "core" / "types.py").read_text()
        + "\n\ndef _probe():\n    from ..samplers.base import Sampler\n",
        "trl_envs.samplers.base": (PACKAGE / "samplers" / "base.py").read_text() + "\nimport trl_envs.core.types\n",
        "trl_envs.errors": "from ..registry import names\n",  # runs before any module of trl_envs.errors (core) loads
    }
    probed = import_graph(PACKAGE, sources)
    assert "trl_envs.core.types (core) -> trl_envs.samplers.base (samplers)" in upward_imports(probed)
    assert "trl_envs.errors (its package) (core) -> trl_envs.registry.names (registry)" in upward_imports(probed)
    circle = find_circle(probed)
    assert circle is not None and {"trl_envs.core.types", "trl_envs.samplers.base"} <= set(circle)


def test_the_folder_checks_catch_what_the_module_checks_miss():
    """A circle between two folders of one stage through different modules (cli.commands -> hub.model_eval, and
    hub.push -> cli.quiet) is no module circle and no upward import, but it is a folder circle; a stage that names a
    module inside another stage's folder splits that folder."""
    sources = {
        "trl_envs.hub.push": (PACKAGE / "hub" / "push.py").read_text()
        + "\n\ndef _probe():\n    from ..cli import quiet\n"
    }
    probed = import_graph(PACKAGE, sources)
    assert "trl_envs.cli.quiet" in probed["trl_envs.hub.push"]
    assert find_circle(probed) is None and not upward_imports(probed)
    circle = find_circle(folder_graph(probed))
    assert circle is not None and {"trl_envs.cli", "trl_envs.hub"} <= set(circle)

    def cli_errors_in_core(module: str) -> int:  # as STAGES was when it named trl_envs.cli.errors in core
        return 0 if module == "trl_envs.cli.errors" else stage_of(module)

    split = split_folders(probed, cli_errors_in_core)
    assert len(split) == 1 and split[0].startswith("trl_envs.cli: core (trl_envs.cli.errors), hub / cli (")


def test_importing_the_package_imports_no_optional_package_and_no_adapter():
    """``import trl_envs`` loads neither an optional extra's package nor an ecosystem adapter (the registry finds those
    by name when asked)."""
    import subprocess
    import sys

    optional = ["gymnasium", "tinker", "tinker_cookbook", "openenv", "reasoning_gym", "textarena", "pettingzoo"]
    optional += ["fastapi", "uvicorn", "openai", "deepspeed", "vllm", "trackio", "wandb", "trl"]
    adapters = ["trl_envs.tinker", "trl_envs.reasoning_gym", "trl_envs.textarena", "trl_envs.pettingzoo"]
    code = "import sys, trl_envs; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert not [m for m in optional + adapters if m in loaded]
