"""CI runs the README's install line and test line and nothing else, so a green CI proves what the README says."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _readme_lines():
    spec = importlib.util.spec_from_file_location("readme_lines", ROOT / ".ci" / "readme_lines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.readme_lines


def test_ci_reads_both_lines_from_the_readme():
    lines = _readme_lines()((ROOT / "README.md").read_text(encoding="utf-8"))
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert lines["install"] == 'pip install torch==2.13.0 && pip install -e ".[test]"'
    assert lines["test"].endswith("python3 -m pytest tests -q -n 2") and lines["test"] in readme
    for command in ("install", "test"):
        printed = subprocess.run(
            [sys.executable, str(ROOT / ".ci" / "readme_lines.py"), command], capture_output=True, text=True, check=True
        )
        assert printed.stdout.strip() == lines[command]


def test_ci_runs_nothing_of_its_own():
    commands = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    own = [c for c in commands if re.search(r"\b(pip|apt-get|apt|pytest|conda|uv)\b", c)]
    assert not own, f".ci/run installs or tests on its own, beyond the README's lines: {own}"
    assert 'bash -euo pipefail -c "$install"' in commands and 'bash -euo pipefail -c "$tests"' in commands


def test_every_no_deps_package_is_pinned():
    for line in (ROOT / "tests" / "requirements-no-deps.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.]*", line.strip()), f"pin exactly: {line}"


@pytest.mark.parametrize(
    ("readme", "message"),
    [
        ("no marks here", "no block marked"),
        ("<!-- ci: install -->\n```bash\nmake\n```\n<!-- ci: test -->\n```bash\nx\n```\n", "does not start"),
    ],
)
def test_a_readme_without_the_marked_lines_stops_ci_with_one_line(readme, message):
    with pytest.raises(SystemExit, match=message):
        _readme_lines()(readme)


def test_the_ecosystems_extra_holds_every_adapters_extra():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    ecosystems = set(extras["ecosystems"])
    for name in ("reasoning-gym", "pettingzoo", "textarena", "tinker", "openenv-runtime"):
        assert set(extras[name]) <= ecosystems, f"the ecosystems extra lacks {set(extras[name]) - ecosystems} ({name})"
