"""The docs cannot rot: every code block of the learning docs is run, in order, in a fresh working directory.

Markdown conventions (see docs/custom_envs.md, "How these docs are tested"):

* ```` ```bash ```` blocks are run with ``bash -euo pipefail`` in the document's working directory, where ``scripts/``
  and ``accelerate_configs/`` of the repository are linked; ```` ```python ```` blocks are executed in one namespace
  per document, in order (as if concatenated), in the same directory. ```` ```text ```` blocks (shown output) and
  ```` ```yaml ```` / ```` ```json ```` blocks are not run. A block without a language is an error.
* A ```` ```text ```` block right after a ```` ```bash ```` or ```` ```python ```` block (nothing but blank lines
  between them) shows that block's output, and is checked against what the block printed on stdout when this test
  runs it: line by line, trailing whitespace and blank lines at either end ignored, a line of just ``...`` standing
  for any run of printed lines (to show a long output in part). A text block after prose is not output (a command to
  copy, a file's content, a printout quoted from elsewhere) and is not checked, unless it carries ``output`` (below).
  The output of a block not run as written (``append``, ``sub``: the test runs a shrunk version) is checked only in a
  full run (``TRL_ENVS_DOCS_FULL=1``); the output of a block not run (``skip``, ``fragment``, a missing ``needs``, the
  shell blocks outside the learning docs) is not checked.
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
    elsewhere);
  - on a shown output: ``abridged="why"``: the output cannot be compared exactly, the reason required (sampled at
    temperature 1, timings, paths, numbers of one machine); ``output="whose"``: this text block is the output of the
    block before it although prose lies between them (say whose output it is), checked as above.

* Every document of README.md and docs/ follows these rules. The learning docs (``RUN_DOCS``) are run whole; in every
  other document the python blocks not marked ``skip`` or ``fragment`` are run, in order, in one namespace.

* ``TRL_ENVS_DOCS_FULL=1`` runs the blocks exactly as written (no ``append``/``sub``), printing their output: that
  is how the outputs shown in the docs were produced.

The Chinese tutorial must hold exactly the English tutorial's code blocks, the outputs they show and the directives
(so the commands a reader of either runs, and what they print, are the ones tested here), and docs/zh/README.md is run
like the others.
"""

from __future__ import annotations

import contextlib
import difflib
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
DIRECTIVES = {"append", "sub", "stdin", "file", "skip", "fragment", "needs", "abridged", "output"}
SHELL = {"bash", "sh", "shell"}
PYTHON = {"python", "py"}
NOT_RUN = {"text", "yaml", "json", "toml", "diff"}
SHOWN = {"text"}  # the language of shown output
ELISION = "..."  # a line of shown output that stands for any run of printed lines
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
    output_of: Block | None = None  # a text block: the runnable block whose output it shows (see shown_output_of)

    def get(self, key: str) -> str | None:
        values = self.directives.get(key)
        return values[-1] if values else None

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def parse(doc: str, text: str | None = None) -> list[Block]:
    """The fenced blocks of ``doc`` (its text read from the repository unless given), with their directives."""
    if text is None:
        text = (ROOT / doc).read_text(encoding="utf-8")
    blocks: list[Block] = []
    end = 0  # where the previous block's fence closed
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        gap = text[end : m.start()]
        end = m.end()
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        directives: dict[str, list[str]] = {}
        d = DIRECTIVE.search(before)
        if d:
            gap = gap[: gap.rstrip("\n").rfind("\n") + 1]  # the directive line is not prose
            for item in shlex.split(d.group(1)):
                key, sep, value = item.partition("=")
                if not sep:
                    raise AssertionError(f"{doc}:{line}: doctest directive {item!r} is not KEY=VALUE")
                directives.setdefault(key, []).append(value)
        lang = m.group(1).strip().split()[0] if m.group(1).strip() else ""
        block = Block(doc, line, lang, m.group(2), directives)
        if lang in SHOWN and blocks and blocks[-1].lang in SHELL | PYTHON and not blocks[-1].get("file"):
            if not gap.strip() or block.get("output") is not None:
                block.output_of = blocks[-1]
        blocks.append(block)
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


def changed_run(block: Block) -> bool:
    """Whether this test runs ``block`` otherwise than as written (``append``/``sub``), so it prints other things."""
    return not FULL and bool(block.get("append") or block.get("sub"))


def shown_output_problems(blocks: list[Block]) -> list[str]:
    """Misuses of the ``abridged`` and ``output`` directives (each needs a reason, and only shown output has them)."""
    problems = []
    for block in blocks:
        for key in ("abridged", "output"):
            value = block.get(key)
            if value is None:
                continue
            if not value.strip():
                problems.append(f"{block.where}: {key} needs a reason")
            elif block.lang not in SHOWN:
                problems.append(f"{block.where}: {key} is for ```text blocks (shown output), not ```{block.lang}")
            elif block.output_of is None:
                problems.append(
                    f"{block.where}: {key} marks the output of the bash or python block before it, and there is "
                    "none (a file block prints nothing)"
                )
    return problems


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def output_matches(shown: str, printed: str) -> bool:
    """Whether ``shown`` is ``printed``, line by line after trailing whitespace (and blank lines at either end) is
    dropped, a line of just ``...`` standing for any run of lines (none included)."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line.strip() == ELISION else re.escape(line) + "\n" for line in _lines(shown)
    )
    return re.fullmatch(pattern, "".join(line + "\n" for line in _lines(printed))) is not None


def stale_output(block: Block, printed: str) -> str | None:
    """Why text block ``block`` does not show what its block printed (``printed``), or None when it does or when it is
    marked ``abridged``."""
    if block.get("abridged") is not None or output_matches(block.code, printed):
        return None
    diff = "".join(
        difflib.unified_diff(
            [line + "\n" for line in _lines(block.code)],
            [line + "\n" for line in _lines(printed)],
            "shown",
            "printed",
        )
    )
    return (
        f"{block.where}: the output shown is not what {block.output_of.where} prints now; show what it prints "
        f"(lines of just {ELISION!r} may stand for lines left out) or mark the block "
        f'<!-- doctest: abridged="why it cannot be compared" -->\n{diff}'
    )


def check_shown_outputs(blocks: list[Block], printed: dict[int, str]) -> None:
    """Assert that every text block showing the output of a block that ran as written (``printed``: its stdout, by
    ``id`` of the block) shows what it printed; all stale outputs are named at once."""
    problems = shown_output_problems(blocks)
    for block in blocks:
        source = block.output_of
        if block.lang in SHOWN and source is not None and id(source) in printed and not changed_run(source):
            problem = stale_output(block, printed[id(source)])
            if problem:
                problems.append(problem)
    if problems:  # raised, not asserted: pytest shows the message (its diffs) as written
        raise AssertionError("\n\n".join(problems))


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


def run_doc(doc: str, workdir: Path, monkeypatch, text: str | None = None) -> list[tuple[str, float]]:
    """Run the blocks of ``doc`` (its text read from the repository unless given) and check the outputs they show."""
    blocks = parse(doc, text)
    printed: dict[int, str] = {}  # the stdout of each block run, by id
    for name in LINKED_DIRS:
        if (ROOT / name).exists():
            (workdir / name).symlink_to(ROOT / name)
    monkeypatch.chdir(workdir)
    monkeypatch.syspath_prepend(str(workdir))
    namespace: dict = {"__name__": "__doc__"}
    timings = []
    before_modules = set(sys.modules)
    try:
        for block in blocks:
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
                printed[id(block)] = proc.stdout
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
                printed[id(block)] = out.getvalue()
                print(f"\n===== {block.where} (python)\n{out.getvalue()}")
            timings.append((block.where, time.perf_counter() - start))
    finally:
        for name in set(sys.modules) - before_modules:  # modules the doc wrote (my_env, ...) must not leak
            module_file = getattr(sys.modules[name], "__file__", None) or ""
            if module_file.startswith(str(workdir)):
                del sys.modules[name]
    check_shown_outputs(blocks, printed)
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
    problems = shown_output_problems(parse(doc))
    assert not problems, "\n".join(problems)


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
    blocks = parse(doc)
    printed: dict[int, str] = {}
    for block in blocks:
        if block.lang not in PYTHON or not_run_reason(block):
            continue
        for module in (block.get("needs") or "").split():
            pytest.importorskip(module, reason=f"{block.where} needs {module}")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(python_code(block), block.where, "exec"), namespace)
        printed[id(block)] = out.getvalue()
    check_shown_outputs(blocks, printed)
    if not printed:
        pytest.skip(f"{doc}: every python block is marked skip or fragment")


@pytest.mark.parametrize("doc,original", sorted(SAME_CODE_AS.items()))
def test_translations_run_the_same_code(doc, original):
    def code(path):
        return [(b.lang, b.code, b.directives) for b in parse(path) if b.lang not in NOT_RUN or b.output_of]

    assert code(doc) == code(original), (
        f"{doc} must hold exactly the code blocks, the outputs they show and the doctest directives of {original}"
    )


SYNTHETIC_DOC = """\
A python block and its output:

```python
for i in range(5):
    print(f"line {i}  ")
```

```text
line 0
line 1
...
line 4
```

A shell command and its output:

<!-- doctest: sub="Hello => Bonjour" -->
```bash
echo Hello
```

```text
Hello
```

```bash
echo printed
```

The shown output follows prose:

<!-- doctest: output="the echo above" -->
```text
printed
```

```text
a text block after prose is no output: not checked
```

```python
import random

print(random.random())
```

<!-- doctest: abridged="a random number: differs per run" -->
```text
0.123
```
"""


def test_shown_outputs_are_checked(tmp_path, monkeypatch):
    """A doc's shown outputs are what its blocks print (in part, or abridged with a reason), else the doc test fails
    naming the stale block, the block that printed and the difference."""
    runs = iter(range(100))

    def run(text):
        workdir = tmp_path / str(next(runs))
        workdir.mkdir()
        return run_doc("synthetic.md", workdir, monkeypatch, text)

    def line_of(text, shown):  # the line of the text block that starts with ``shown``
        return text[: text.index("```text\n" + shown)].count("\n") + 1

    assert len(run(SYNTHETIC_DOC)) == 4  # the four runnable blocks ran, and every output shown matched

    stale = SYNTHETIC_DOC.replace("line 4\n```", "line 5\n```")
    with pytest.raises(AssertionError) as e:
        run(stale)
    assert f"synthetic.md:{line_of(stale, 'line 0')}: the output shown is not what synthetic.md:3 prints now" in str(
        e.value
    )
    assert "\n-line 5\n" in str(e.value) and "\n+line 4\n" in str(e.value)  # the difference: shown, printed

    unmarked = SYNTHETIC_DOC.replace('<!-- doctest: abridged="a random number: differs per run" -->\n', "")
    with pytest.raises(AssertionError, match=f"synthetic.md:{line_of(unmarked, '0.123')}: the output shown is not"):
        run(unmarked)

    no_reason = SYNTHETIC_DOC.replace('abridged="a random number: differs per run"', 'abridged=" "')
    with pytest.raises(AssertionError, match=f"synthetic.md:{line_of(no_reason, '0.123')}: abridged needs a reason"):
        run(no_reason)

    after_prose = SYNTHETIC_DOC.replace("```text\nprinted\n", "```text\nnot printed\n")
    with pytest.raises(AssertionError, match="the output shown is not what"):
        run(after_prose)  # marked output: checked although prose lies between
    run(after_prose.replace('<!-- doctest: output="the echo above" -->\n', ""))  # unmarked: not output

    misplaced = SYNTHETIC_DOC.replace("```text\na text", '<!-- doctest: abridged="why" -->\n```text\na text')
    assert shown_output_problems(parse("synthetic.md", misplaced)) == [
        f"synthetic.md:{line_of(misplaced, 'a text')}: abridged marks the output of the bash or python block before "
        "it, and there is none (a file block prints nothing)"
    ]


@pytest.mark.parametrize(
    "shown,printed,matches",
    [
        ("a\nb\n", "a  \nb\n\n", True),  # trailing whitespace and blank lines at the ends
        ("a\n...\nd\n", "a\nb\nc\nd\n", True),
        ("a\n  ...\nb\n", "a\nb\n", True),  # an elision may stand for no line
        ("...\nd\n", "a\nb\nd\n", True),
        ("a\n...\n", "a\nb\n", True),
        ("a\n...\nd\n", "a\nb\nc\n", False),  # the lines around an elision must be there
        ("a\nb\n", "a\nb\nc\n", False),  # without an elision, every line is shown
        ("a\n b\n", "a\nb\n", False),  # leading whitespace counts
        ("a...\n", "abc\n", False),  # an elision is a line of its own
    ],
)
def test_output_matching(shown, printed, matches):
    assert output_matches(shown, printed) is matches


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
