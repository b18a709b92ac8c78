"""The offline GPU check's two scripts, on the CPU: scripts/gpu_bundle.py's plan (what it would download, without the
network) and scripts/gpu_check.sh's ``--cpu`` mode (the same stages, small), its summary and its verdicts."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)
needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not installed: the bundle pins its version here (pip install -e '.[deepspeed]')",
)


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _run(cmd: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=timeout)


# -- scripts/gpu_bundle.py ------------------------------------------------------------------------------------------


@needs_deepspeed
def test_bundle_plan_pins_the_installed_versions_for_python_312_on_linux(tmp_path):
    done = _run([sys.executable, "scripts/gpu_bundle.py", "--list", "--dest", str(tmp_path / "b")], timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for name in ("trl", "transformers", "accelerate", "peft", "datasets", "dill", "multiprocess", "huggingface_hub"):
        assert f"{name}=={importlib.metadata.version(name)}" in out, name
    for name in ("httpx2", "httpcore2", "truststore", "hjson", "pydantic", "pydantic_core", "annotated-types"):
        assert f"wheel  {name}==" in out, name  # what huggingface_hub 2.x and deepspeed need beyond a GPU image
    wheel_lines = [line for line in out.splitlines() if "pip download" in line and "--only-binary=:all:" in line]
    assert wheel_lines and all(
        "--python-version 3.12" in line and "--platform manylinux2014_x86_64" in line and "--no-deps" in line
        for line in wheel_lines
    )
    deepspeed = importlib.metadata.version("deepspeed")
    assert f"sdist  deepspeed=={deepspeed}" in out and f"--no-binary=:all: deepspeed=={deepspeed}" in out
    assert "tiny-chat" not in out  # the tiny models ship in the repository: nothing to carry or build
    assert "pyarrow" not in out and "torch==" not in out  # a GPU image has them; pyarrow alone is 40 MB
    assert not (tmp_path / "b").exists()  # --list downloads and writes nothing


def test_bundle_folder_is_ignored_by_git():
    assert "/.gpu_bundle/" in (REPO / ".gitignore").read_text().splitlines()


@needs_deepspeed
def test_bundle_names_a_package_missing_here_in_one_line(monkeypatch, capsys):
    bundle = _load("gpu_bundle")
    monkeypatch.setattr(bundle, "WHEELS", [*bundle.WHEELS, ("no-such-package-xyz", "test")])
    assert bundle.main(["--list"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no-such-package-xyz is not installed" in err


# -- scripts/gpu_check.sh / gpu_check.py ----------------------------------------------------------------------------


def test_check_refuses_unknown_stages_and_a_missing_gpu(tmp_path):
    done = _run(["bash", "scripts/gpu_check.sh", "--cpu", "--stages", "zero5", "--out", str(tmp_path)], timeout=60)
    assert done.returncode == 2 and "unknown stage(s) zero5; known: versions, zero2" in done.stderr
    done = _run(["bash", "scripts/gpu_check.sh", "--bundle", str(tmp_path / "absent")], timeout=60)
    assert done.returncode == 2 and f"--bundle: no folder at '{tmp_path / 'absent'}'" in done.stderr
    import torch

    if not torch.cuda.is_available():
        done = _run([sys.executable, "scripts/gpu_check.py", "--out", str(tmp_path)], timeout=120)
        assert done.returncode == 2 and "no CUDA GPU visible; run with --cpu" in done.stderr


def test_cpu_mode_runs_the_stages_and_writes_the_summary(tmp_path, tiny_model_path):
    """versions, fsdp2 (skipped on a CPU, with its reason), the async run's clean exit, and gpu_rollouts when the tree
    has no bench for it (skipped with a notice)."""
    stages = ["versions", "fsdp2", "async_exit"]
    has_bench = (REPO / "bench" / "gpu_rollouts.py").exists()
    if not has_bench:
        stages.append("gpu_rollouts")
    done = _run(["bash", "scripts/gpu_check.sh", "--cpu", "--stages", *stages, "--out", str(tmp_path)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    by_name = {s["name"]: s for s in summary["stages"]}
    assert [s["name"] for s in summary["stages"]] == stages and summary["device"] == "cpu"
    versions = by_name["versions"]
    assert versions["verdict"] == "PASS" and versions["details"]["USE_HUB_KERNELS"] == "NO"
    assert versions["details"]["packages"]["trl"] == importlib.metadata.version("trl")
    assert by_name["fsdp2"]["verdict"] == "SKIP" and "plain DDP on a CPU" in by_name["fsdp2"]["note"]
    run = by_name["async_exit"]
    assert run["verdict"] == "PASS", run
    assert run["details"]["exit_code"] == 0 and run["details"]["children_left"] == []
    assert any("spawn_main" in cmd for cmd in run["details"]["children_seen"])  # the sampler process ran, and ended
    if not has_bench:
        assert by_name["gpu_rollouts"]["verdict"] == "SKIP" and "not in this tree" in by_name["gpu_rollouts"]["note"]
    text = (tmp_path / "summary.txt").read_text()
    assert all(f"{name:<13} {by_name[name]['verdict']}" in text for name in stages)


def test_a_run_past_its_stage_timeout_fails_and_is_stopped(tmp_path):
    done = _run(
        [sys.executable, "scripts/gpu_check.py", "--cpu", "--stages", "async_exit", "--stage_timeout", "1"]
        + ["--out", str(tmp_path)]
    )
    assert done.returncode == 1
    stage = json.loads((tmp_path / "summary.json").read_text())["stages"][0]
    assert stage["verdict"] == "FAIL" and stage["note"].startswith("did not exit within 1s")
    assert stage["details"]["exit_code"] is None


def test_gpu_doc_table_quotes_the_recipes_numbers():
    """docs/gpu.md's table: the measured recipe with its measurement, every other one with its estimate."""
    import re

    sys.path.insert(0, str(REPO / "bench"))
    try:
        import recipe_estimates
    finally:
        sys.path.remove(str(REPO / "bench"))
    doc = (REPO / "docs" / "gpu.md").read_text()
    for path, r in json.loads((REPO / "bench" / "results" / "recipe_estimates.json").read_text())["recipes"].items():
        size, task = re.match(r"scripts/configs/qwen2\.5-(\d\.\db)/(\w+)\.yaml", path).groups()
        row = next(line for line in doc.splitlines() if line.startswith(f"| {size.upper()} `{task}`"))
        measured = recipe_estimates.MEASURED.get(path)
        if measured:
            low, high = measured["seconds_per_step"]
            assert f"| {measured['peak_memory_gb']} GB | {low}–{high} s" in row and "**measured**" in row, row
        else:
            assert f"| ~{r['peak_memory_gb']} GB | ~{r['seconds_per_step']} s |" in row and row.endswith("estimated |")


def test_versions_stage_names_requirements_the_installed_versions_miss(monkeypatch):
    """On a GPU image with an older package than a carried one needs, the check says which and how to carry it."""
    import importlib.metadata as md

    check = _load("gpu_check")
    assert check.unmet_requirements(check.CARRIED) == []  # this environment is consistent
    real = md.version
    monkeypatch.setattr(md, "version", lambda name: "0.0.1" if name.lower() == "pyyaml" else real(name))
    unmet = check.unmet_requirements(["trl"])
    assert unmet == [
        f"trl needs pyyaml{next(r for r in md.requires('trl') if r.startswith('pyyaml'))[6:]}, found 0.0.1"
    ]


@needs_deepspeed
def test_bundle_carries_an_added_package_at_its_version_here(capsys):
    bundle = _load("gpu_bundle")
    assert bundle.main(["--list", "--add", "regex"]) == 0
    assert f"wheel  regex=={importlib.metadata.version('regex')}" in capsys.readouterr().out


@pytest.mark.parametrize(("stages", "verdict"), [(["versions", "async_exit"], "PASS"), (["versions", "zero2"], "FAIL")])
def test_versions_fails_for_a_missing_optional_package_only_when_a_stage_needs_it(
    tmp_path, monkeypatch, stages, verdict
):
    check_module = _load("gpu_check")
    monkeypatch.setattr(check_module, "PACKAGES", ["torch", "no_such_optional_pkg"])
    monkeypatch.setattr(check_module, "NEEDED_BY", {"no_such_optional_pkg": ("zero2", "zero3")})
    monkeypatch.setattr(check_module, "CARRIED", [])
    stage = check_module.Stage("versions")
    check_module.Check(tmp_path, cpu=True, stage_timeout=60, stages=stages).versions(stage)
    assert stage.details["packages"]["no_such_optional_pkg"].startswith("not available")
    if verdict == "FAIL":
        assert stage.verdict == "FAIL" and stage.note == "missing: no_such_optional_pkg", stage.note
    else:
        assert stage.verdict == "PASS" and stage.note == "no no_such_optional_pkg (only zero2, zero3 need it; not run)"
