"""The docs cannot rot: every code block of the learning docs is run, in order, in a fresh working directory.

Markdown conventions (see docs/custom_envs.md, "How these docs are tested"):

* ```` ```bash ```` blocks are run with ``bash -euo pipefail`` in the document's working directory, where ``scripts/``
  and ``accelerate_configs/`` of the repository are linked; ```` ```python ```` blocks are executed in one namespace
  per document, in order (as if concatenated), in the same directory. ```` ```text ```` blocks (shown output) and
  ```` ```yaml ```` / ```` ```json ```` blocks are not run. A block without a language is an error.
* An HTML comment on the line right before a block tunes how it is run, invisible on GitHub:
  ``<!-- doctest: KEY="VALUE" ... -->`` with

  - ``append="--max_steps 2"``: flags appended to the block's command (the test runs a shrunk version of a training
    command; the doc shows the real one);
  - ``sub="OLD => NEW"``: replace OLD by NEW in the block before running it (repeatable);
  - ``stdin="8\\n4\\n"``: what the command reads on stdin;
  - ``file="my_env.py"``: write the block to that file (relative to the working directory) instead of running it;
  - ``skip="why"``: not run; the reason is required (a complete block too costly or needing a service or the Hub);
  - ``fragment="what it needs"``: an excerpt, not complete on its own (an ``...`` argument, a method body); the
    reason is required. Every python block not marked ``fragment`` must be complete: in each document, the python
    blocks read in order define or import every name they use (checked with ruff's undefined-name rule);
  - ``needs="textarena"``: the block runs only where that optional library is installed (skipped, with the reason,
    elsewhere).

* Every document of README.md and docs/ follows these rules. The learning docs (``RUN_DOCS``) are run whole; in every
  other document the python blocks not marked ``skip`` or ``fragment`` are run, in order, in one namespace.

* ``TRL_ENVS_DOCS_FULL=1`` runs the blocks exactly as written (no ``append``/``sub``), printing their output: that
  is how the outputs shown in the docs were produced.

The Chinese tutorial must hold exactly the English tutorial's code blocks and directives (so the commands a reader of
either runs are the ones tested here), and docs/zh/README.md is run like the others.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN_DOCS = [
    "docs/tutorial_first_rl.md",
    "docs/custom_envs.md",
    "docs/hyperparameters.md",
    "docs/zh/README.md",
    "docs/envs_as_datasets.md",
    "docs/gymnasium.md",
    "docs/traces.md",
]
SAME_CODE_AS = {"docs/zh/tutorial_first_rl.md": "docs/tutorial_first_rl.md"}
LEARN_DOCS = RUN_DOCS + list(SAME_CODE_AS)
ALL_DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]
OTHER_DOCS = [doc for doc in ALL_DOCS if doc not in LEARN_DOCS]
DIRECTIVES = {"append", "sub", "stdin", "file", "skip", "fragment", "needs"}
SHELL = {"bash", "sh", "shell"}
PYTHON = {"python", "py"}
NOT_RUN = {"text", "yaml", "json", "toml", "diff"}
FULL = os.environ.get("TRL_ENVS_DOCS_FULL") == "1"
LINKED_DIRS = ["scripts", "accelerate_configs"]

pytestmark = pytest.mark.timeout(4 * 3600 if FULL else 600)  # full: the hyperparameter sweep alone takes ~40 min

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
DIRECTIVE = re.compile(r"<!--\s*doctest:(.*?)-->\s*$", re.S)


@dataclass
class Block:
    doc: str
    line: int
    lang: str
    code: str
    directives: dict[str, list[str]] = field(default_factory=dict)

    def get(self, key: str) -> str | None:
        values = self.directives.get(key)
        return values[-1] if values else None

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def parse(doc: str) -> list[Block]:
    text = (ROOT / doc).read_text(encoding="utf-8")
    blocks = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        directives: dict[str, list[str]] = {}
        d = DIRECTIVE.search(before)
        if d:
            for item in shlex.split(d.group(1)):
                key, sep, value = item.partition("=")
                if not sep:
                    raise AssertionError(f"{doc}:{line}: doctest directive {item!r} is not KEY=VALUE")
                directives.setdefault(key, []).append(value)
        lang = m.group(1).strip().split()[0] if m.group(1).strip() else ""
        blocks.append(Block(doc, line, lang, m.group(2), directives))
    return blocks


def _with_subs(block: Block) -> str:
    """The block's code with its ``sub`` directives applied (none in a full run)."""
    code = block.code
    if not FULL:
        for sub in block.directives.get("sub", []):
            old, sep, new = sub.partition(" => ")
            assert sep and old in code, f"{block.where}: sub {sub!r} does not apply"
            code = code.replace(old, new)
    return code


def shell_command(block: Block) -> str:
    code = _with_subs(block)
    if not FULL and block.get("append"):
        code = code.rstrip("\n") + " " + block.get("append") + "\n"
    return code


def python_code(block: Block) -> str:
    """A python block (or a file block) with its ``sub`` directives applied."""
    code = _with_subs(block)
    assert FULL or not block.get("append"), f"{block.where}: append is for shell blocks; use sub"
    return code


def not_run_reason(block: Block) -> str | None:
    """Why a block is not run (``skip`` or ``fragment``, each with its reason required), or None."""
    for key in ("skip", "fragment"):
        if block.get(key) is not None:
            assert block.get(key).strip(), f"{block.where}: {key} needs a reason"
            return block.get(key)
    return None


def child_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        TRL_EXPERIMENTAL_SILENCE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
        # experiment trackers offline, their files in the doc's working directory
        TRACKIO_DIR=str(workdir / "trackio"),
        WANDB_MODE="offline",
        WANDB_DIR=str(workdir),
        WANDB_SILENT="true",
    )
    return env


def run_doc(doc: str, workdir: Path, monkeypatch) -> list[tuple[str, float]]:
    for name in LINKED_DIRS:
        if (ROOT / name).exists():
            (workdir / name).symlink_to(ROOT / name)
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(workdir))
    namespace: dict = {"__name__": "__doc__"}
    timings = []
    before_modules = set(sys.modules)
    try:
        for block in parse(doc):
            if block.lang in NOT_RUN:
                continue
            if not_run_reason(block):
                continue
            for module in (block.get("needs") or "").split():
                pytest.importorskip(module, reason=f"{block.where} needs {module}")
            start = time.perf_counter()
            if block.get("file"):
                path = workdir / block.get("file")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(python_code(block), encoding="utf-8")
            elif block.lang in SHELL:
                stdin = block.get("stdin")
                stdin = stdin.encode().decode("unicode_escape") if stdin is not None else ""
                proc = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", shell_command(block)],
                    cwd=workdir,
                    env=child_env(workdir),
                    input=stdin,
                    capture_output=True,
                    text=True,
                    timeout=3600 if FULL else 300,
                )
                if FULL:
                    print(f"\n===== {block.where} $ {shell_command(block).strip()}\n{proc.stdout}")
                assert proc.returncode == 0, (
                    f"{block.where}: exit status {proc.returncode}\n--- command\n"
                    f"{shell_command(block)}--- stdout\n{proc.stdout[-4000:]}\n"
                    f"--- stderr\n{proc.stderr[-6000:]}"
                )
            elif block.lang in PYTHON:
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(python_code(block), block.where, "exec"), namespace)
                print(f"\n===== {block.where} (python)\n{out.getvalue()}")
            timings.append((block.where, time.perf_counter() - start))
    finally:
        for name in set(sys.modules) - before_modules:  # modules the doc wrote (my_env, ...) must not leak
            module_file = getattr(sys.modules[name], "__file__", None) or ""
            if module_file.startswith(str(workdir)):
                del sys.modules[name]
    return timings


@pytest.mark.parametrize("doc", RUN_DOCS)
def test_doc_code_blocks_run(doc, tmp_path, monkeypatch):
    timings = run_doc(doc, tmp_path, monkeypatch)
    assert timings, f"{doc}: no code block was run"
    print("\n".join(f"{t:6.1f}s  {where}" for where, t in timings))


@pytest.mark.parametrize("doc", ALL_DOCS)
def test_blocks_are_labelled_and_directives_known(doc):
    for block in parse(doc):
        assert block.lang, f"{block.where}: label every code block (```bash, ```python, ```text for output ...)"
        assert block.lang in SHELL | PYTHON | NOT_RUN, f"{block.where}: unknown code block language {block.lang!r}"
        unknown = set(block.directives) - DIRECTIVES
        assert not unknown, f"{block.where}: unknown doctest directives {unknown}"


def complete_python(doc: str) -> str:
    """The python blocks of ``doc`` not marked ``fragment``, in order, as one module (file blocks included: a later
    block imports them by module name, so each file block is also checked on its own)."""
    return "\n\n".join(
        b.code for b in parse(doc) if b.lang in PYTHON and b.get("fragment") is None and not b.get("file")
    )


@pytest.mark.parametrize("doc", ALL_DOCS)
def test_python_blocks_are_complete_or_marked_fragments(doc, tmp_path):
    """A reader copying a doc's python blocks in order gets every import and definition they use."""
    from test_house_rules import _ruff  # this interpreter's ruff module, else one on PATH; skips without one

    ruff = _ruff()
    for block in parse(doc):
        if block.lang in PYTHON and block.get("fragment") is None:
            try:
                compile(block.code, block.where, "exec", flags=__import__("ast").PyCF_ALLOW_TOP_LEVEL_AWAIT)
            except SyntaxError as e:
                pytest.fail(f"{block.where}: not valid Python ({e.msg}, line {e.lineno}); mark it fragment=...")
    sources = {"blocks.py": complete_python(doc)}
    sources |= {b.get("file"): b.code for b in parse(doc) if b.get("file") and b.get("fragment") is None}
    for name, code in sources.items():
        if not code.strip():
            continue
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code, encoding="utf-8")
        proc = subprocess.run(
            [
                *ruff,
                "check",
                "--isolated",
                "--no-cache",
                "--select",
                "F821,F822",
                "--output-format",
                "concise",
                str(path),
            ],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, (
            f"{doc} ({name}): python blocks use names they never define or import (add them, or mark the block "
            f'<!-- doctest: fragment="..." -->):\n{proc.stdout}'
        )


@pytest.mark.parametrize("doc", [d for d in OTHER_DOCS if any(b.lang in PYTHON for b in parse(d))])
def test_python_blocks_of_the_other_docs_run(doc, tmp_path, monkeypatch):
    """The python blocks outside the learning docs, not marked skip or fragment, run in order in one namespace."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__doc__"}
    ran = 0
    for block in parse(doc):
        if block.lang not in PYTHON or not_run_reason(block):
            continue
        for module in (block.get("needs") or "").split():
            pytest.importorskip(module, reason=f"{block.where} needs {module}")
        exec(compile(python_code(block), block.where, "exec"), namespace)
        ran += 1
    if not ran:
        pytest.skip(f"{doc}: every python block is marked skip or fragment")


@pytest.mark.parametrize("doc,original", sorted(SAME_CODE_AS.items()))
def test_translations_run_the_same_code(doc, original):
    ours = [(b.lang, b.code, b.directives) for b in parse(doc) if b.lang not in NOT_RUN]
    theirs = [(b.lang, b.code, b.directives) for b in parse(original) if b.lang not in NOT_RUN]
    assert ours == theirs, f"{doc} must hold exactly the code blocks (and doctest directives) of {original}"


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", LEARN_DOCS)
def test_relative_links_resolve(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = (ROOT / doc).parent / target.split("#")[0]
        assert path.exists(), f"{doc}: broken link {target}"


def test_readme_links_the_learning_docs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for doc in [
        "docs/tutorial_first_rl.md",
        "docs/custom_envs.md",
        "docs/hyperparameters.md",
        "scripts/minimal_grpo_loop.py",
        "docs/zh/README.md",
        "docs/zh/tutorial_first_rl.md",
    ]:
        assert f"]({doc})" in readme, f"README.md does not link {doc}"
        assert (ROOT / doc).exists(), f"README.md links {doc}, which does not exist"
