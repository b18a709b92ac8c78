"""A dependency outside the ranges pyproject declares is one line, with no traceback: the package, the version found,
the range that works and the pip line that installs it -- at import of the trainers, from the training scripts and
from ``python -m trl_envs``. The ranges are read from the installed metadata of trl-envs, so the tests do too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_envs.errors import versions
from trl_envs.errors.types import is_plain_error
from trl_envs.errors.versions import (
    EXIT_STATUS,
    IncompatibleVersionError,
    check_installed_versions,
    declared_requirements,
    installed_version,
)

REPO = Path(__file__).resolve().parents[1]
DECLARED = declared_requirements()
pytestmark = pytest.mark.skipif(DECLARED is None, reason="trl-envs is not installed (no metadata to read ranges from)")


def requirement_of(package: str) -> str:
    return dict(DECLARED)[package]


def fake_versions(**fake: str | None):
    """``installed_version`` with some packages' versions replaced (``None``: not installed)."""
    return lambda package: fake[package] if package in fake else installed_version(package)


def test_ranges_come_from_the_installed_metadata_of_trl_envs():
    declared = dict(DECLARED)
    for package in ("torch", "trl", "transformers", "accelerate", "datasets", "peft", "tokenizers"):
        assert package in declared, f"{package} is not among trl-envs' declared dependencies"
    assert ">=" in declared["trl"] and "<" in declared["trl"]  # TRL is capped: the seam follows one minor release
    assert not any(name in declared for name in ("pytest", "deepspeed", "ruff")), "an extra's dependency was checked"


def test_the_installed_versions_pass():
    check_installed_versions()  # this environment was installed from pyproject: nothing to say


def test_a_trl_outside_its_range_is_one_line_naming_version_range_and_pip_line():
    with pytest.raises(IncompatibleVersionError) as raised:
        check_installed_versions(version_of=fake_versions(trl="1.17.0"))
    message = str(raised.value)
    assert "\n" not in message
    assert "found trl 1.17.0" in message
    assert requirement_of("trl") in message
    assert message.endswith(f'pip install "{requirement_of("trl")}"')
    assert [m.package for m in raised.value.mismatches] == ["trl"]


def test_every_package_out_of_range_is_named_in_the_one_line():
    with pytest.raises(IncompatibleVersionError) as raised:
        check_installed_versions(version_of=fake_versions(transformers="4.57.6", peft=None))
    message = str(raised.value)
    assert "\n" not in message
    assert "transformers 4.57.6" in message and "no peft" in message
    assert f'pip install "{requirement_of("transformers")}" "{requirement_of("peft")}"' in message


def test_a_local_build_label_counts_as_its_release():
    torch_version = installed_version("torch")
    check_installed_versions(version_of=fake_versions(torch=torch_version.split("+")[0] + "+cpu"))


def test_the_error_is_an_import_error_a_command_prints_as_one_line():
    with pytest.raises(ImportError):
        check_installed_versions(version_of=fake_versions(trl="0.29.1"))
    assert is_plain_error(IncompatibleVersionError([versions.Mismatch("trl", "0.29.1", "trl>=1.16,<1.17")]))


def test_the_check_can_be_skipped_to_try_a_new_release(monkeypatch):
    monkeypatch.setenv(versions.SKIP_ENV, "1")
    check_installed_versions(version_of=fake_versions(trl="1.17.0"))


def test_program_names():
    assert versions.program_name("/x/scripts/train_grpo.py") == "train_grpo.py"
    assert versions.program_name("/site-packages/trl_envs/__main__.py") == "trl-envs"
    assert versions.program_name("-c") == "python"


PATCH = (
    "import importlib.metadata as m\n"
    "real = m.version\n"
    "m.version = lambda name: '1.17.0' if name.lower() == 'trl' else real(name)\n"
)


def run_patched(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter whose metadata says trl 1.17.0 is installed."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    env.pop(versions.SKIP_ENV, None)
    env.pop("TRL_ENVS_TRACEBACK", None)
    return subprocess.run(
        [sys.executable, "-c", PATCH + code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def assert_one_line(done: subprocess.CompletedProcess, prog: str) -> None:
    assert done.returncode == EXIT_STATUS, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines[0].startswith(f"{prog}: error: trl_envs works with {requirement_of('trl')}; found trl 1.17.0.")
    assert lines[0].endswith(f'pip install "{requirement_of("trl")}"')


@pytest.mark.parametrize(
    "statement",
    ["from trl_envs import EnvGRPOTrainer", "import trl_envs.trainers"],
    ids=["from-trl_envs-import-trainer", "import-trainers"],
)
def test_importing_the_trainers_with_a_wrong_trl_is_one_line(statement):
    done = run_patched(f"{statement}\nprint('imported')\n")
    assert "imported" not in done.stdout
    assert_one_line(done, "python")


def test_the_caught_error_is_catchable_as_import_error():
    done = run_patched(
        "try:\n    import trl_envs.trainers\n"
        "except ImportError as e:\n    print(type(e).__name__)\n"
        "else:\n    print('no error')\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "IncompatibleVersionError"


def run_trl_envs_patched(*args: str) -> subprocess.CompletedProcess:
    return run_patched(
        f"import runpy, sys\nsys.argv = ['trl_envs/__main__.py', *{list(args)!r}]\n"
        "runpy.run_module('trl_envs', run_name='__main__', alter_sys=True)\n"
    )


def test_python_m_trl_envs_with_a_wrong_trl_is_one_line():
    assert_one_line(run_trl_envs_patched("eval", "--env", "arithmetic", "--model", "none"), "trl-envs")


def test_listing_envs_with_a_wrong_trl_warns_and_lists():
    done = run_trl_envs_patched("list", "--kind", "builtin")
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"trl-envs: warning: trl_envs works with {requirement_of('trl')}; found trl 1.17.0.")
    assert "arithmetic" in done.stdout.split()


@pytest.mark.parametrize("script", ["train_grpo.py", "train_dpo.py"])
def test_training_scripts_with_a_wrong_trl_are_one_line(script):
    path = REPO / "scripts" / script
    done = run_patched(
        f"import runpy, sys\nsys.argv = [{str(path)!r}]\nrunpy.run_path({str(path)!r}, run_name='__main__')\n"
    )
    assert_one_line(done, script)


def check_versions_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("check_versions", REPO / "scripts" / "check_versions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_versions_lowest_pins_each_floor_and_newest_keeps_the_ranges():
    script = check_versions_script()
    dependencies = script.declared_dependencies()
    lowest = script.requirements_for("lowest", dependencies, {})
    newest = script.requirements_for("newest", dependencies, {})
    for line in dependencies:
        name, spec = script.split_requirement(line)
        floor = script.floor_of(spec)
        assert lowest[name] == (f"{name}=={floor}" if floor else line), line
        assert newest[name] == f"{name}{spec}"
    pinned = script.requirements_for("lowest", dependencies, {"transformers": "==0.1"})
    assert pinned["transformers"] == "transformers==0.1"
    assert script.out_of_range({"transformers": "==0.1"}, dependencies) == ["transformers==0.1"]
    assert (
        script.out_of_range(
            {"transformers": f"=={script.floor_of(dict(map(script.split_requirement, dependencies))['transformers'])}"},
            dependencies,
        )
        == []
    )


def test_docs_table_floors_are_pyprojects():
    script = check_versions_script()
    floors = {
        name: script.floor_of(spec) for name, spec in map(script.split_requirement, script.declared_dependencies())
    }
    rows = {}
    for line in (REPO / "docs" / "versions.md").read_text().splitlines():
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and cells[0] in floors:
            rows[cells[0]] = cells[1]
    assert set(rows) == set(floors), "docs/versions.md's table lists every dependency of pyproject once"
    for name, floor in floors.items():
        assert rows[name] == (floor or "none"), f"docs/versions.md says {name} {rows[name]}, pyproject {floor}"
