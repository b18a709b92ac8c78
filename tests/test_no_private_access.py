"""No test or bench reaches into a private name of trl_envs: they use the package's public surfaces.

What is checked (an AST scan of every ``.py`` file under tests/ and bench/, so names in strings and comments do not
count, except the dotted targets of patches): a name that starts with ``_`` but is not a dunder (``_metrics``, not
``__class__``), read, written, deleted or patched on an object of the package, as far as the file's code shows it:

* an object *named like a trainer*: a name ``trainer`` or ``*_trainer``, an attribute ``.trainer`` / ``.*_trainer``;
* a name the file imports from ``trl_envs`` (a module, class or function: ``async_rollouts._AsyncState``,
  ``EnvGRPOTrainer._async_rollout``), an attribute reached from one (``trl_envs.trainers.grpo._x``), and a name the
  file binds to a call of one (``t = EnvGRPOTrainer(...)``, then ``t._train_index``) or of ``*Trainer`` /
  ``*_trainer(...)``;

directly (``obj._x``), through ``getattr`` / ``setattr`` / ``delattr`` / ``hasattr`` / ``monkeypatch.setattr`` /
``monkeypatch.delattr`` / ``patch.object`` with a literal name, through a dotted target string
(``monkeypatch.setattr("trl_envs.trainers.grpo._x", f)``, ``patch("trl_envs.x._y")``), and by importing a private name
or module of ``trl_envs``. Not flagged: ``self._x`` inside a class (a test's own subclass), ``super()._x``, objects the
code does not tie to the package (``sampler._x`` of a test's own sampler), dunders.

Where a private patch is the only way to simulate a fault, the test lists it in :data:`ALLOWED` with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "bench")
PACKAGE = "trl_envs"
ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "delattr", "hasattr", "object"}  # object: unittest.mock.patch.object
PATCH_FUNCTIONS = {"setattr", "delattr", "patch"}  # monkeypatch.setattr("pkg.mod.name", ...), mock.patch("pkg...")

ALLOWED: dict[tuple[str, str], str] = {
    ("tests/test_layering.py", "trl_envs._layers"): "the layering test reads the stage table it enforces; the table "
    "module is private so that it stays out of the package's API",
    ("tests/test_openenv.py", "_client"): "simulates a dropped connection (the fault under test) by closing the "
    "OpenEnv client's websocket under the session",
    ("tests/test_openenv.py", "_ws"): "(same line) the websocket of OpenEnv's own client",
    ("tests/test_demo_model.py", "_base_model_text"): "the model card's base-model line for a local demo-model "
    "path; a card needs a trained output folder to render",
}
"""``(file, private name)`` -> why reaching that private name is the only way to test what the test tests."""


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _trainer_like_name(name: str) -> bool:
    return name == "trainer" or name.endswith("_trainer")


def _call_name(call: ast.expr) -> str:
    func = call.func if isinstance(call, ast.Call) else None
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


class _Package:
    """What a file ties to the package: names imported from it, and names bound to calls of those or of trainers."""

    def __init__(self, tree: ast.AST):
        self.imported: set[str] = set()
        self.private_imports: list[tuple[ast.AST, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.partition(".")[0] == PACKAGE:
                        self.imported.add(alias.asname or PACKAGE)
                        if any(_is_private(p) for p in alias.name.split(".")):
                            self.private_imports.append((node, alias.name))
            elif (
                isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").partition(".")[0] == PACKAGE
            ):
                self.imported.update(alias.asname or alias.name for alias in node.names)
                if any(_is_private(p) for p in node.module.split(".")):
                    self.private_imports.append((node, node.module))
                else:
                    self.private_imports += [(node, a.name) for a in node.names if _is_private(a.name)]
        self.bound: set[str] = set()
        for node in ast.walk(tree):
            value = getattr(node, "value", None) if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if isinstance(node, ast.withitem):
                value, targets = node.context_expr, [node.optional_vars]
            else:
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if value is not None and self._makes_object(value):
                self.bound.update(t.id for t in targets if isinstance(t, ast.Name))

    def _makes_object(self, value: ast.expr) -> bool:
        if not isinstance(value, ast.Call):
            return False
        name = _call_name(value)
        return name.endswith("Trainer") or _trainer_like_name(name) or self.of_package(value.func)

    def of_package(self, node: ast.expr) -> bool:
        """Whether ``node`` is, as far as the file shows, an object of the package (module docstring)."""
        if isinstance(node, ast.Name):
            return _trainer_like_name(node.id) or node.id in self.imported or node.id in self.bound
        if isinstance(node, ast.Attribute):
            return _trainer_like_name(node.attr.lstrip("_")) or self.of_package(node.value)
        return False


def private_accesses(
    source: str, filename: str = "<source>", allowed: dict[tuple[str, str], str] | None = ALLOWED
) -> list[str]:
    """``"<file>:<line>: <name>: <code>"`` for each private access on an object of the package (module docstring),
    except those ``allowed`` lists."""
    tree = ast.parse(source, filename)
    package = _Package(tree)
    found = [(node, dotted) for node, dotted in package.private_imports]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and package.of_package(node.value):
            found.append((node, node.attr))
        elif isinstance(node, ast.Call) and node.args:
            func_name = _call_name(node)
            first = node.args[0]
            if (
                func_name in PATCH_FUNCTIONS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
                and first.value.partition(".")[0] == PACKAGE
                and any(_is_private(p) for p in first.value.split("."))
            ):
                found.append((node, first.value))
            elif len(node.args) >= 2 and func_name in ATTRIBUTE_FUNCTIONS:
                attr = node.args[1]
                if (
                    isinstance(attr, ast.Constant)
                    and isinstance(attr.value, str)
                    and _is_private(attr.value)
                    and package.of_package(first)
                ):
                    found.append((node, attr.value))
    out = set()
    for node, name in found:
        if allowed is None or (filename, name) not in allowed:
            out.add(
                (node.lineno, f"{filename}:{node.lineno}: {name}: {(ast.get_source_segment(source, node) or '')[:80]}")
            )
    return [text for _, text in sorted(out)]


def _tree_accesses(allowed: dict[tuple[str, str], str] | None = ALLOWED) -> list[str]:
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += private_accesses(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix(), allowed)
    return found


def test_no_test_or_bench_reaches_a_private_name_of_the_package():
    found = _tree_accesses()
    assert not found, (
        "use the package's public surfaces instead of private names (or, where a private patch is the only way to "
        "simulate a fault, list it in ALLOWED with the reason):\n" + "\n".join(found)
    )


def test_every_allowed_entry_is_still_needed():
    unlisted = {tuple(f.split(": ")[0].split(":")[:1]) + (f.split(": ")[1],) for f in _tree_accesses(allowed=None)}
    stale = sorted(set(ALLOWED) - unlisted)
    assert not stale, f"ALLOWED entries no test needs any more (remove them): {stale}"


# -- the scanner itself ---------------------------------------------------------------------------------------


def _lines(found: list[str]) -> list[int]:
    return sorted(int(f.split(":")[1]) for f in found)


def test_the_scan_catches_each_way_of_reaching_a_trainer_private():
    source = """
trainer = EnvGRPOTrainer(model, args, envs)
out = trainer._generate_and_score_completions(batch)
logged = trainer._logs["rewards"]["env"]
trainer._rollout = timed
t = EnvDPOTrainer(model, args, envs)
index = t._train_index
ref_trainer = make()
ref_trainer._metrics["train"].clear()
monkeypatch.setattr(trainer, "_get_per_token_logps_and_entropies", capture)
real = getattr(t, "_builder")


class Side:
    def run(self):
        self.trainer._generate_and_score_completions(self.inputs)
"""
    assert _lines(private_accesses(source)) == [3, 4, 5, 7, 9, 10, 11, 16]


def test_the_scan_catches_class_and_module_level_patches():
    source = """
import trl_envs.rollout.batching as batching
from trl_envs import EnvGRPOTrainer, GroupIndex
from trl_envs.trainers import async_rollouts
from trl_envs.trainers.grpo import _check_first_group
from trl_envs.envs._private_module import thing
from unittest import mock

monkeypatch.setattr(async_rollouts, "lookahead_batches", lambda k, steps: 3)
monkeypatch.setattr(async_rollouts._AsyncState, "train_step_of", lambda self, index: -100)
monkeypatch.setattr(EnvGRPOTrainer, "_async_rollout", no_pipeline)
monkeypatch.setattr(async_rollouts, "_THREADS", 2)
monkeypatch.setattr("trl_envs.trainers.grpo._check_first_group", check)
index = GroupIndex(rows)
setattr(index, "_rows", [])
hasattr(batching, "_current")
value = batching._current.get()
with mock.patch.object(GroupIndex, "_key", key), mock.patch("trl_envs.cli.errors._exit"):
    pass
"""
    assert _lines(private_accesses(source)) == [5, 6, 10, 11, 12, 13, 15, 16, 17, 18, 18]


def test_the_scan_has_no_false_positives():
    source = '''
"""trainer._logs in a docstring is fine."""
from trl_envs import EnvGRPOTrainer
trainer = EnvGRPOTrainer(model, args, envs)  # trainer._metrics in a comment too
batch = trainer.generation_batch(keys)
name = trainer.__class__.__name__
text = "trainer._logs"
sampler._calls += 1
trainer_base.LockstepSampler = Recording
other = make_sampler()
other._state = 1
monkeypatch.setattr(EnvGRPOTrainer, "generation_batch", fake)
monkeypatch.setattr("os.environ._data", {})
monkeypatch.setattr(RolloutPipeline, "__init__", refuse)


class Recording(EnvGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        self._seen = inputs
        return super()._generate_and_score_completions(inputs)
'''
    assert private_accesses(source) == []
