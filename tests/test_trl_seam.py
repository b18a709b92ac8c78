"""The seam to TRL (``trl_envs/trainers/trl_seam.py``) and the guard that keeps TRL's private names in it.

``check_trl_compatibility`` passes on the installed TRL and names a missing entry. The guard finds private names by
scanning code, not by reading the seam's table:

* **The field's private names**: every single-underscore, non-dunder name that a class of :data:`FIELD_CLASSES`, or a
  class of its MRO defined in ``trl``, ``transformers`` or ``accelerate``, defines in its body (``vars(cls)``:
  methods, properties, class attributes) or assigns as ``self._name`` inside its class body.
* **Unexported names**: a name imported from a ``trl`` module, or read as an attribute of one, that is in neither
  ``trl.__all__`` nor that module's ``__all__``; a ``_name`` imported from, or read on, a ``transformers`` or
  ``accelerate`` module (reaching a submodule is not a use).
* **A use** in a module under ``trl_envs/`` (AST: comments and strings do not count): ``obj._name`` (read, write,
  delete, call), ``def _name`` or ``_name = ...`` directly in a class body, ``getattr`` / ``setattr`` / ``hasattr`` /
  ``delattr(obj, "_name")`` with a literal name, an unexported name as above; and a string literal (not a
  docstring) containing a message text the seam lists (messages cannot be found by scanning, so these come from the
  table).

The rules: outside ``trl_seam.py`` every use is a violation, except ``def name`` and ``super().name`` in the module
the table lists as the entry's ``overridden_in`` (a module that overrides a hook may call TRL's version of it); every
use in ``trl_seam.py`` has a table entry of that name; every entry is used (an override: its module defines the
method; any other entry: ``trl_seam.py`` names it); every public function and alias of the seam is named by another
module of the package, a script or a bench. A private attribute of our own that shares its name with one of the
field's counts like any other use: rename it. Each violation is reported as ``file:line`` with the fix.

Not seen: names built at run time (``getattr(obj, name)`` with a variable), private names of classes outside
:data:`FIELD_CLASSES` (torch's included), and code outside ``trl_envs/``.
"""

from __future__ import annotations

import abc
import ast
import functools
import importlib
import inspect
import re
import types
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from trl_envs.trainers import trl_seam

PACKAGE = Path(trl_seam.__file__).resolve().parents[1]
ROOT = PACKAGE.parent
SEAM = trl_seam.SEAM_MODULE

FIELD_PACKAGES = ("trl", "transformers", "accelerate")
FIELD_CLASSES = (
    # the trainers and configs trl_envs subclasses or builds, and what Trainer hands to callbacks
    "trl.GRPOTrainer",
    "trl.GRPOConfig",
    "trl.DPOTrainer",
    "trl.DPOConfig",
    "trl.SFTTrainer",
    "trl.SFTConfig",
    "trl.trainer.dpo_trainer.DataCollatorForPreference",
    "trl.distributed.DistributedBackend",
    "transformers.Trainer",
    "transformers.TrainingArguments",
    "transformers.TrainerCallback",
    "transformers.TrainerState",
    "transformers.TrainerControl",
    # the model, config, tokenizer and generation pieces trl_envs reads or subclasses
    "transformers.PreTrainedModel",
    "transformers.PretrainedConfig",
    "transformers.PreTrainedTokenizerBase",
    "transformers.GenerationConfig",
    "transformers.LogitsProcessor",
    "transformers.StoppingCriteria",
    # a trainer's accelerator and the optimizer it wraps
    "accelerate.Accelerator",
    "accelerate.optimizer.AcceleratedOptimizer",
)


def _is_private(name: str) -> bool:
    """A single-underscore name, not a dunder, and not one Python's ``abc`` adds to every abstract class."""
    return name.startswith("_") and not name.startswith("__") and name != "_" and name not in vars(abc.ABC)


def _resolve(dotted: str):
    module, _, attr = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attr)


@functools.cache
def _parsed(path: str) -> ast.Module:
    return ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)


def _class_node(cls: type) -> ast.ClassDef | None:
    """The ``class`` statement of ``cls`` in its source file (followed by ``__qualname__``), or None."""
    try:
        body = _parsed(inspect.getsourcefile(cls)).body
    except (TypeError, OSError):
        return None
    node = None
    for part in cls.__qualname__.split("."):
        node = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if node is None:
            return None
        body = node.body
    return node


def _self_assignments(cls: type, private: bool = True) -> set[str]:
    """The names ``cls``'s class body assigns as ``self.<name> = ...``: the private ones, or (``private=False``) the
    public ones."""
    node = _class_node(cls)
    if node is None:
        return set()
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and _is_private(n.attr) == private
    }


TRL_TRAINERS = ("trl.GRPOTrainer", "trl.DPOTrainer")
TRAINER_BASES = frozenset({"Trainer", "GRPOTrainer", "DPOTrainer", "SFTTrainer"})


@functools.cache
def trainer_attributes() -> dict[str, tuple[str, ...]]:
    """Attribute name -> the TRL trainers that set it: the names without an underscore that the class body of a
    trainer of :data:`TRL_TRAINERS` assigns as ``self.<name>`` and ``transformers.Trainer`` does not (Trainer's
    attributes, ``model``, ``args``, ``state``, ``accelerator``, ``train_dataset``, ..., are its documented surface)."""
    from transformers import Trainer

    public = _self_assignments(Trainer, private=False)
    owners: dict[str, set[str]] = defaultdict(set)
    for dotted in TRL_TRAINERS:
        for name in _self_assignments(_resolve(dotted), private=False) - public:
            owners[name].add(dotted)
    return {name: tuple(sorted(where)) for name, where in owners.items()}


def _bases(node: ast.ClassDef) -> set[str]:
    return {ast.unparse(b).rpartition(".")[2] for b in node.bases}


def _trainer_classes(classes: dict[str, set[str]]) -> frozenset[str]:
    """The trainer classes among ``classes`` (name -> base names): subclasses of a TRL / transformers trainer, and
    the classes such a trainer is built from (its mixins)."""
    trainers = set(TRAINER_BASES)
    grew = True
    while grew:
        grew = False
        for name, bases in classes.items():
            if name not in trainers and bases & trainers:
                trainers.add(name)
                grew = True
    mixins = {b for name in trainers for b in classes.get(name, ()) if b in classes}
    return frozenset(trainers | mixins)


@functools.cache
def package_classes() -> dict[str, set[str]]:
    """Every class of the package by name -> its base names."""
    return {
        node.name: _bases(node)
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(_parsed(str(path)))
        if isinstance(node, ast.ClassDef)
    }


@functools.cache
def field_private_names() -> dict[str, tuple[str, ...]]:
    """Private name -> the field classes (``module.Class``) that define or assign it (see the module docstring)."""
    owners: dict[str, set[str]] = defaultdict(set)
    seen: set[type] = set()
    for dotted in FIELD_CLASSES:
        for cls in _resolve(dotted).__mro__:
            if cls in seen or cls.__module__.partition(".")[0] not in FIELD_PACKAGES:
                continue
            seen.add(cls)
            where = f"{cls.__module__}.{cls.__qualname__}"
            for name in {n for n in vars(cls) if _is_private(n)} | _self_assignments(cls):
                owners[name].add(where)
    return {name: tuple(sorted(where)) for name, where in owners.items()}


def _exported(module: str, name: str) -> bool:
    """Whether ``name`` of the field module ``module`` is public: for ``trl``, listed in ``trl.__all__`` or the module's
    ``__all__``; for ``transformers`` and ``accelerate``, not starting with ``_``."""
    if module.partition(".")[0] != "trl":
        return not _is_private(name)
    import trl

    return name in trl.__all__ or name in getattr(importlib.import_module(module), "__all__", ())


@dataclass(frozen=True)
class Use:
    """One use of a private or unexported name in a module: where, what, and how (``kind``)."""

    rel: str
    line: int
    name: str
    kind: str  # attribute | super | method | class attribute | getattr | unexported | message | trainer attribute
    owners: tuple[str, ...]
    inside: str | None = None  # the innermost function the use is in


class _Scanner(ast.NodeVisitor):
    def __init__(
        self,
        rel: str,
        private: dict[str, tuple[str, ...]],
        messages: Iterable[str],
        trainer_attrs: dict[str, tuple[str, ...]] | None = None,
        trainer_classes: frozenset[str] = frozenset(),
    ):
        self.rel, self.private, self.messages = rel, private, tuple(messages)
        self.trainer_attrs, self.trainer_classes = trainer_attrs or {}, trainer_classes
        self.classes: list[bool] = []  # for each enclosing class: whether it is a trainer class
        self.uses: list[Use] = []
        self.names: set[str] = set()  # every attribute, getattr, imported and class-body name, private or not
        self.functions: list[str] = []
        self.field_modules: dict[str, str] = {}  # local name -> the trl / transformers / accelerate module it is
        self.docstrings: set[int] = set()

    def add(self, node: ast.AST, name: str, kind: str, owners: tuple[str, ...] | None = None) -> None:
        owners = self.private.get(name, ()) if owners is None else owners
        inside = self.functions[-1] if self.functions else None
        self.uses.append(Use(self.rel, node.lineno, name, kind, owners, inside))

    def scan(self, tree: ast.Module) -> list[Use]:
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
                first = body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    self.docstrings.add(id(first.value))
        self.visit(tree)
        return sorted(self.uses, key=lambda u: (u.line, u.name))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.names.add(stmt.name)
                if stmt.name in self.private:
                    self.add(stmt, stmt.name, "method")
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
            for target in targets:
                if isinstance(target, ast.Name):
                    self.names.add(target.id)
                    if target.id in self.private:
                        self.add(stmt, target.id, "class attribute")
        self.classes.append(node.name in self.trainer_classes)
        self.generic_visit(node)
        self.classes.pop()

    def _is_trainer(self, node: ast.expr) -> bool:
        """Whether ``node`` is, as far as the code shows, a trainer: ``self`` in a trainer class, or a name or
        attribute ending in ``trainer``."""
        if isinstance(node, ast.Name) and node.id == "self":
            return bool(self.classes) and self.classes[-1]
        last = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        return last.lower().endswith("trainer")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def _module_of(self, node: ast.expr) -> str | None:
        """The field module ``node`` evaluates to, if it is a name bound to one or a submodule reached from one."""
        if isinstance(node, ast.Name):
            return self.field_modules.get(node.id)
        if isinstance(node, ast.Attribute):
            parent = self._module_of(node.value)
            value = getattr(importlib.import_module(parent), node.attr, None) if parent is not None else None
            if isinstance(value, types.ModuleType):
                return value.__name__
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.names.add(node.attr)
        module = self._module_of(node.value)
        if module is not None:
            value = getattr(importlib.import_module(module), node.attr, None)
            if not isinstance(value, types.ModuleType) and not node.attr.startswith("__"):
                if not _exported(module, node.attr):
                    self.add(node, node.attr, "unexported", (module,))
        elif node.attr in self.private:
            value = node.value
            is_super = isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"
            self.add(node, node.attr, "super" if is_super else "attribute")
        elif node.attr in self.trainer_attrs and self._is_trainer(node.value):
            self.add(node, node.attr, "trainer attribute", self.trainer_attrs[node.attr])
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Name)
            and func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            name = node.args[1].value
            self.names.add(name)
            if name in self.private:
                self.add(node, name, "getattr")
            elif name in self.trainer_attrs and self._is_trainer(node.args[0]):
                self.add(node, name, "trainer attribute", self.trainer_attrs[name])
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            root = alias.name.partition(".")[0]
            if root in FIELD_PACKAGES:
                self.field_modules[alias.asname or root] = alias.name if alias.asname else root

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.names.update(alias.name for alias in node.names)
        if node.level or not node.module or node.module.partition(".")[0] not in FIELD_PACKAGES:
            return
        module = importlib.import_module(node.module)
        for alias in node.names:
            value = getattr(module, alias.name, None)
            if isinstance(value, types.ModuleType):
                self.field_modules[alias.asname or alias.name] = value.__name__
            elif not _exported(node.module, alias.name):
                self.add(node, alias.name, "unexported", (node.module,))

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.docstrings:
            for text in self.messages:
                if text in node.value:
                    self.names.add(text)
                    self.add(node, text, "message", ("a TRL message",))


def _messages(table: Iterable[trl_seam.PrivateName]) -> list[str]:
    return [e.name for e in table if not e.name.isidentifier()]


def scan(text: str, rel: str, table=trl_seam.TRL_PRIVATE_NAMES) -> _Scanner:
    """Scan one module's source; ``rel`` is its path under the repository root."""
    tree = ast.parse(text, filename=rel)
    classes = package_classes() | {n.name: _bases(n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    scanner = _Scanner(rel, field_private_names(), _messages(table), trainer_attributes(), _trainer_classes(classes))
    scanner.uses = scanner.scan(tree)
    return scanner


def _fix(use: Use) -> str:
    where = f"{use.rel}:{use.line}: {use.kind} {use.name!r} ({', '.join(use.owners[:3])})"
    if use.rel == SEAM:
        return f"{where} is not in TRL_PRIVATE_NAMES -- list it there"
    if use.kind == "method":
        return f"{where} -- list it in TRL_PRIVATE_NAMES with overridden_in={use.rel!r}"
    if use.kind == "super":
        return f"{where} of an unlisted override -- list it in TRL_PRIVATE_NAMES with overridden_in={use.rel!r}"
    if use.kind == "trainer attribute":
        return (
            f"{where} is not documented API -- read it from trainer.args where it copies a config field, else "
            f"through a function of {SEAM} listed in TRL_PRIVATE_NAMES (an attribute of our own: rename it)"
        )
    if use.kind in ("unexported", "message"):
        return f"{where} -- move it into {SEAM} and list it in TRL_PRIVATE_NAMES"
    return (
        f"{where} -- move it into a function of {SEAM} and list it in TRL_PRIVATE_NAMES "
        "(an attribute or method of our own: rename it)"
    )


def violations(scanners: Iterable[_Scanner], table=trl_seam.TRL_PRIVATE_NAMES) -> list[str]:
    """Every breach of the rules (module docstring), one line each with its fix."""
    scanners = list(scanners)
    listed = {e.name for e in table}
    overrides = {(e.name, e.overridden_in) for e in table if e.overridden_in}
    found = []
    for scanner in scanners:
        for use in scanner.uses:
            if use.rel == SEAM:
                ok = use.name in listed
            elif use.kind == "method":
                ok = (use.name, use.rel) in overrides
            elif use.kind == "super":
                ok = (use.name, use.rel) in overrides
            else:
                ok = False
            if not ok:
                found.append(_fix(use))
    by_rel = {s.rel: s for s in scanners}
    for entry in table:
        if entry.overridden_in:
            module = by_rel.get(entry.overridden_in)
            used = module is not None and any(u.kind == "method" and u.name == entry.name for u in module.uses)
            where = f"no class in {entry.overridden_in} defines {entry.name}"
        else:
            used = SEAM in by_rel and entry.name in by_rel[SEAM].names
            where = f"{SEAM} does not use it"
        if not used:
            found.append(f"{SEAM}: dead entry {entry.name!r} of {entry.owner}: {where} -- remove the entry")
    return found


@functools.cache
def package_scanners() -> tuple[_Scanner, ...]:
    modules = sorted(PACKAGE.rglob("*.py"))
    return tuple(scan(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix()) for p in modules)


# -- the compatibility check -------------------------------------------------------------------------------------------


def test_installed_trl_has_every_private_name_the_seam_uses():
    trl_seam.check_trl_compatibility()


def test_a_missing_private_name_is_reported_with_the_seam_module(monkeypatch):
    from trl import GRPOTrainer

    monkeypatch.delattr(GRPOTrainer, "_generate_and_score_completions")
    with pytest.raises(trl_seam.TRLCompatibilityError, match=r"trl_seam\.py.*'_generate_and_score_completions'"):
        trl_seam.check_trl_compatibility()


def test_a_name_only_dpo_needs_does_not_stop_grpo():
    """transformers versions without Trainer._init_training_state can still train GRPO (env-driven DPO rounds need
    it); each trainer checks the names it uses."""
    entry = trl_seam.PrivateName("_no_such_method", "transformers.Trainer", "DPO rounds only", trainer="dpo")
    trl_seam.check_trl_compatibility([entry], trainer="grpo")
    with pytest.raises(trl_seam.TRLCompatibilityError, match="'_no_such_method'"):
        trl_seam.check_trl_compatibility([entry], trainer="dpo")


def test_a_missing_private_attribute_set_in_init_is_reported():
    entry = trl_seam.PrivateName("_no_such_thing", "trl.GRPOTrainer", "nothing", check="source")
    assert entry.source == "self._no_such_thing"
    with pytest.raises(trl_seam.TRLCompatibilityError, match=r"trl_seam\.py relies on '_no_such_thing'"):
        trl_seam.check_trl_compatibility([entry])


# -- the guard ---------------------------------------------------------------------------------------------------------


def test_the_field_private_names_are_found_in_trl_and_transformers():
    names = field_private_names()
    for name in (
        "_generate_and_score_completions",  # GRPOTrainer method
        "_metrics",  # self._metrics = ... in GRPOTrainer / DPOTrainer.__init__
        "_save_checkpoint",  # transformers.Trainer method
        "_init_training_state",
        "_signature_columns",  # self._signature_columns = ... in Trainer
        "_name_or_path",  # PretrainedConfig
        "_tag_names",  # class attribute
    ):
        assert name in names, name
    assert "trl.trainer.grpo_trainer.GRPOTrainer" in names["_generate_and_score_completions"]
    assert not [n for n in names if n.startswith("__")]


FAKE_MODULE = '''
import trl.trainer.grpo_trainer as gt
from trl import GRPOTrainer
from trl.trainer import grpo_trainer
from trl.trainer.dpo_trainer import DataCollatorForPreference


class T(GRPOTrainer):
    """A docstring naming self._metrics and "You are using 'rollout_func'" is not a use."""

    _tag_names = ["x"]

    def _save_checkpoint(self, model, trial):
        return super()._save_checkpoint(model, trial)

    def step(self):
        _metrics = 1  # a local variable; _tokenizer in a comment
        getattr(self, "_signature_columns")
        self._metrics["train"].append(_metrics)
        return super()._prepare_dataset(None, None, None, "x")


def _name_or_path(model):  # a function of the module, not a method
    return gt.create_model_from_path, grpo_trainer.GRPOTrainer, "You are using 'rollout_func' here"


import transformers.trainer
from transformers.trainer import _is_peft_model
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

PARSE = transformers.trainer._parse_optim_args
'''


A_MESSAGE = trl_seam.PrivateName("You are using 'rollout_func'", "trl.GRPOTrainer", "a warning", check="source")


def test_the_scanner_finds_every_kind_of_use():
    table = (*trl_seam.TRL_PRIVATE_NAMES, A_MESSAGE)  # a message is found only when the table lists it
    found = [(u.line, u.kind, u.name) for u in scan(FAKE_MODULE, "trl_envs/fake.py", table).uses]
    assert found == [
        (5, "unexported", "DataCollatorForPreference"),
        (11, "class attribute", "_tag_names"),
        (13, "method", "_save_checkpoint"),
        (14, "super", "_save_checkpoint"),
        (18, "getattr", "_signature_columns"),
        (19, "attribute", "_metrics"),
        (20, "super", "_prepare_dataset"),
        (24, "message", "You are using 'rollout_func'"),
        (24, "unexported", "create_model_from_path"),
        (28, "unexported", "_is_peft_model"),
        (31, "unexported", "_parse_optim_args"),
    ]


def test_the_rules_allow_only_listed_overrides_and_flag_dead_entries():
    fake = scan(FAKE_MODULE, "trl_envs/fake.py", (*trl_seam.TRL_PRIVATE_NAMES, A_MESSAGE))
    seam = scan("import trl\nVERSION = trl.__version__\n", SEAM)
    override = trl_seam.PrivateName("_save_checkpoint", "transformers.Trainer", "x", overridden_in="trl_envs/fake.py")
    unused = trl_seam.PrivateName("_metrics", "trl.GRPOTrainer", "x", check="source")
    found = violations([fake, seam], [override, unused])
    assert [v.split(": ")[0] for v in found] == [
        "trl_envs/fake.py:5",
        "trl_envs/fake.py:11",
        "trl_envs/fake.py:18",
        "trl_envs/fake.py:19",
        "trl_envs/fake.py:20",
        "trl_envs/fake.py:24",
        "trl_envs/fake.py:24",
        "trl_envs/fake.py:28",
        "trl_envs/fake.py:31",
        SEAM,
    ]
    assert "dead entry '_metrics'" in found[-1]
    # unlisted, the override is a violation too; in the seam, an unlisted private name is
    unlisted = [v for v in violations([fake], []) if v.startswith("trl_envs/fake.py:13: method '_save_checkpoint'")]
    assert len(unlisted) == 1 and unlisted[0].endswith("with overridden_in='trl_envs/fake.py'"), unlisted
    seam_peek = scan("def peek(trainer):\n    return trainer._total_train_tokens\n", SEAM)
    [found] = violations([seam_peek], [])
    assert found.startswith(f"{SEAM}:2: attribute '_total_train_tokens' (trl.trainer.dpo_trainer.DPOTrainer")
    assert found.endswith("is not in TRL_PRIVATE_NAMES -- list it there")


def test_trl_private_names_are_used_only_through_the_seam():
    """The rules of the module docstring on every module under ``trl_envs/``; prints each violation with its fix."""
    modules = package_scanners()
    assert len(modules) > 30 and any(s.rel == SEAM for s in modules)
    found = violations(modules)
    assert not found, "TRL / transformers private names outside the seam, or a stale seam table:\n" + "\n".join(found)


def test_every_function_of_the_seam_is_used_by_the_package():
    """A seam function or alias that no other module of the package, and no script or bench, names is dead code:
    remove it and its entries."""
    table_api = {"CHECKS", "PrivateName", "SEAM_MODULE", "TRLCompatibilityError", "TRL_PRIVATE_NAMES"}
    defined = {
        name
        for name, value in vars(trl_seam).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == trl_seam.__name__
    }
    assert defined <= set(trl_seam.__all__), sorted(defined - set(trl_seam.__all__))
    used = set().union(*(s.names for s in package_scanners() if s.rel != SEAM))
    for path in [*ROOT.glob("scripts/*.py"), *ROOT.glob("bench/*.py")]:
        used |= set(re.findall(r"\btrl_seam\.(\w+)", path.read_text()))
    assert sorted(set(trl_seam.__all__) - table_api - used) == []


# -- the table's own fields and TRL's attributes without an underscore -------------------------------------------------


def test_an_entry_with_a_stray_check_value_is_refused():
    with pytest.raises(ValueError, match=r"entry '_x' of trl.GRPOTrainer: check must be one of \['attr', 'source'\]"):
        trl_seam.PrivateName("_x", "trl.GRPOTrainer", "nothing", check="save_checkpoint")
    with pytest.raises(TypeError):  # the fields after relied_on are keyword-only: a stray positional cannot slip in
        trl_seam.PrivateName("_x", "trl.GRPOTrainer", "nothing", "save_checkpoint")
    with pytest.raises(ValueError, match="source_text needs check='source'"):
        trl_seam.PrivateName("_x", "trl.GRPOTrainer", "nothing", source_text="self._x")


def test_every_table_entry_is_well_formed():
    for entry in trl_seam.TRL_PRIVATE_NAMES:
        assert entry.check in trl_seam.CHECKS, entry
        assert entry.overridden_in is None or (ROOT / entry.overridden_in).is_file(), entry


def test_trl_trainer_attributes_without_an_underscore_are_found():
    names = trainer_attributes()
    for name in ("eos_token_ids", "vllm_generation", "scale_rewards", "num_generations", "use_vllm", "loss_types"):
        assert name in names, name
    for public in ("model", "args", "state", "accelerator", "train_dataset", "processing_class"):
        assert public not in names, public  # transformers.Trainer's surface


TRAINER_ATTRIBUTES_MODULE = """
from trl import GRPOTrainer


class Mixin:
    def sizes(self):
        return self.num_generations, self.args.num_generations


class T(Mixin, GRPOTrainer):
    def step(self, trainer):
        self.eos_token_ids = [1]
        getattr(self, "vllm_generation")
        return trainer.scale_rewards, self.trainer.use_vllm, self.args.scale_rewards


class Sampler:
    def __init__(self, temperature):
        self.temperature = temperature
"""


def test_trl_trainer_attributes_are_caught_outside_the_seam():
    uses = [(u.line, u.kind, u.name) for u in scan(TRAINER_ATTRIBUTES_MODULE, "trl_envs/fake.py").uses]
    assert uses == [
        (7, "trainer attribute", "num_generations"),  # self of a trainer's mixin; args.num_generations is public
        (12, "trainer attribute", "eos_token_ids"),
        (13, "trainer attribute", "vllm_generation"),
        (14, "trainer attribute", "scale_rewards"),
        (14, "trainer attribute", "use_vllm"),
    ]
    found = violations([scan(TRAINER_ATTRIBUTES_MODULE, "trl_envs/fake.py")], [])
    assert len(found) == 5 and "read it from trainer.args" in found[0]
    seam = scan("def stops(trainer):\n    return trainer.eos_token_ids\n", SEAM)
    [unlisted] = violations([seam], [])
    assert unlisted.startswith(f"{SEAM}:2: trainer attribute 'eos_token_ids'") and "list it there" in unlisted
