"""No test or bench reaches into a trainer's private attributes: they use the trainers' public accessors.

What is checked (an AST scan of every ``.py`` file under tests/ and bench/, so names in strings and comments do not
count): an attribute whose name starts with ``_`` but is not a dunder (``_metrics``, not ``__class__``), read, written
or deleted on an object *named like a trainer*:

* a name ``trainer`` or ``*_trainer`` (``trainer._logs``, ``env_trainer._rollout = f``),
* an attribute ``.trainer`` or ``._trainer`` / ``.*_trainer`` (``self.trainer._generate(...)``),
* any other name the same file binds to a call of something named ``*Trainer`` (``t = EnvGRPOTrainer(...)``, then
  ``t._train_index``), or to ``*_trainer(...)`` / ``make_trainer(...)`` calls,

and the same through ``getattr`` / ``setattr`` / ``delattr`` / ``monkeypatch.setattr`` with a literal name
(``monkeypatch.setattr(trainer, "_rollout", f)``). Not flagged: ``self._x`` inside a class, ``super()._x``, other
objects (``sampler._x``), dunders.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "bench")
ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "delattr"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _trainer_like_name(name: str) -> bool:
    return name == "trainer" or name.endswith("_trainer")


def _call_makes_trainer(call: ast.expr) -> bool:
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return name.endswith("Trainer") or _trainer_like_name(name)


def _bound_trainers(tree: ast.AST) -> set[str]:
    """Names bound (anywhere in the file) to the result of a call that makes a trainer."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _call_makes_trainer(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.withitem) and _call_makes_trainer(node.context_expr):
            if isinstance(node.optional_vars, ast.Name):
                names.add(node.optional_vars.id)
    return names


def _names_trainer(node: ast.expr, bound: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return _trainer_like_name(node.id) or node.id in bound
    if isinstance(node, ast.Attribute):
        return _trainer_like_name(node.attr.lstrip("_"))
    return False


def private_trainer_accesses(source: str, filename: str = "<source>") -> list[str]:
    """``"<file>:<line>: <code>"`` for each private attribute access on a trainer-named object (module docstring)."""
    tree = ast.parse(source, filename)
    bound = _bound_trainers(tree)
    found = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and _names_trainer(node.value, bound):
            name = node.attr
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func = node.func
            func_name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            target, attr = node.args[0], node.args[1]
            if (
                func_name in ATTRIBUTE_FUNCTIONS
                and isinstance(attr, ast.Constant)
                and isinstance(attr.value, str)
                and _is_private(attr.value)
                and _names_trainer(target, bound)
            ):
                name = attr.value
        if name is not None:
            found.append(f"{filename}:{node.lineno}: {ast.get_source_segment(source, node)}")
    return sorted(set(found))


def test_no_test_or_bench_reads_a_trainer_private_attribute():
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found += private_trainer_accesses(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not found, "use the trainers' public accessors instead of private attributes:\n" + "\n".join(found)


# -- the scanner itself ---------------------------------------------------------------------------------------


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
    found = private_trainer_accesses(source)
    lines = sorted(int(f.split(":")[1]) for f in found)
    assert lines == [3, 4, 5, 7, 9, 10, 11, 16], found


def test_the_scan_has_no_false_positives():
    source = '''
"""trainer._logs in a docstring is fine."""
trainer = EnvGRPOTrainer(model, args, envs)  # trainer._metrics in a comment too
batch = trainer.generation_batch(keys)
name = trainer.__class__.__name__
text = "trainer._logs"
sampler._calls += 1
trainer_base.LockstepSampler = Recording
other = make_sampler()
other._state = 1


class Recording(EnvGRPOTrainer):
    def _generate_and_score_completions(self, inputs):
        self._seen = inputs
        return super()._generate_and_score_completions(inputs)
'''
    assert private_trainer_accesses(source) == []
