"""The README's numbers come from generated files: the default run's summary and the recipes' estimates."""

import importlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _bench(name: str):
    sys.path.insert(0, str(REPO / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "bench"))


def test_readme_quotes_the_default_runs_summary():
    result = json.loads((REPO / "bench" / "results" / "default_run.json").read_text())
    readme = " ".join((REPO / "README.md").read_text().split())
    assert _bench("default_run").readme_summary(result) in readme, "run python bench/default_run.py, then copy its line"


def test_readme_quotes_the_recipe_estimates():
    estimates = json.loads((REPO / "bench" / "results" / "recipe_estimates.json").read_text())["recipes"]
    r = estimates["scripts/configs/qwen2.5-0.5b/arithmetic.yaml"]
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"peak ~{r['peak_memory_gb']} GB, ~{r['minutes']:.0f} min for {r['steps']} steps" in readme


def test_no_issue_numbers_or_dates_in_user_docs():
    import re

    docs = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]  # design pages too: history is in bench/results
    for doc in docs:
        text = doc.read_text()
        assert not re.search(r"\b[Ii]ssue \d+", text), doc
        assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), doc


def test_the_tutorial_quotes_the_default_run_on_the_shipped_model():
    """The tutorial quotes the default run's times and held-out figures from bench/results/default_run.json, which
    names the shipped weights it was measured on; the demo model ships, so no doc gives a build time for it."""
    result = json.loads((REPO / "bench" / "results" / "default_run.json").read_text())
    tutorial = " ".join((REPO / "docs" / "tutorial_first_rl.md").read_text().split())
    quoted = (
        f"default run took {result['wall_seconds']:.0f} s, {result['train_runtime_seconds']:.0f} s of it training, "
        f"and took held-out pass@1 from {result['held_out_before']['pass@1']:.3f} to "
        f"{result['held_out_after']['pass@1']:.3f}"
    )
    assert quoted in tutorial, "docs/tutorial_first_rl.md: quote bench/results/default_run.json"
    assert "default_run.json" in (REPO / "docs" / "benchmarks.md").read_text()
    import hashlib

    weights = REPO / "trl_envs" / "assets" / result["demo_model"] / "model.safetensors"
    assert hashlib.sha256(weights.read_bytes()).hexdigest() == result["demo_model_sha256"], (
        "the shipped demo model changed since the default run: run python bench/default_run.py again"
    )
    for doc in (REPO / "README.md", REPO / "docs" / "tutorial_first_rl.md"):
        text = " ".join(doc.read_text().split())
        assert "building the model took" not in text and "already built" not in text, doc
