"""Every real-model recipe in ``scripts/configs/qwen2.5-*/`` loads through its script and trains one step.

No weights can be downloaded here, so each recipe runs on a randomly initialised ``Qwen2ForCausalLM`` built locally
from the model's published architecture (``bench/recipe_estimates.py``: every width, head count, intermediate size,
RoPE and norm setting kept) with **one decoder layer instead of 24 / 28**, the tiny model's 512-token ChatML tokenizer,
and **a vocabulary of** :data:`VOCAB_SIZE` **(576) rows instead of 151,936**. The vocabulary cut does not weaken the
check: with this tokenizer no id at or above 512 ever appears in a prompt or a reference answer, so rows 512..151,935
only ever mattered as ids a random model could sample (each decoding to nothing); the model still has more rows than the
tokenizer has tokens, as the real one does (151,936 rows for 151,665 tokens), so it can still sample ids the tokenizer
lacks, within the rollout's ``vocab_size`` bound (read from the model's config); and the vocabulary is no setting of
any recipe (LoRA's ``all-linear`` targets the decoder's linear layers, whose shapes are all the real ones). What it
removes is the 151,936-row fp32 output layer: its matmuls in TRL's chunked log-prob forward and backward, AdamW over it
and saving it after training were most of each run on a CPU (11-34 s a recipe on 2 cores; 3-7 s with 576 rows).

To take seconds on a CPU the test also overrides, on the command line as a user would: ``max_steps=1``, one small
group (``num_generations=2``, 2 rows, no accumulation), 4 tokens per turn and at most 2 turns, fp32 on the CPU
(``use_cpu``, no bf16, ``dtype float32``), no gradient checkpointing, no card evaluation, no checkpoints. Everything
else (learning rate, scheduler, LoRA, env options, reward scaling, ...) is the recipe's own.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted(p.relative_to(REPO) for p in (REPO / "scripts" / "configs").glob("qwen2.5-*/*.yaml"))
# The shrunk models' vocabulary: the tiny tokenizer's 512 tokens padded to the next multiple of 64, so there are rows
# beyond the tokenizer as in the real model (the module docstring says why this keeps the check).
VOCAB_SIZE = 576


def _load(name: str):
    spec = importlib.util.spec_from_file_location(
        name, REPO / ("bench" if name == "recipe_estimates" else "scripts") / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def shrunk_models(tmp_path_factory, tokenizer):
    """model id -> a directory with a random one-layer model of that architecture, :data:`VOCAB_SIZE` vocabulary rows
    (more than the tokenizer's tokens) and the tiny tokenizer."""
    assert len(tokenizer) < VOCAB_SIZE  # every id the tokenizer makes has its own row, and some rows are beyond it
    estimates = _load("recipe_estimates")
    return {
        model_id: estimates.save_random_qwen(
            model_id,
            tokenizer,
            tmp_path_factory.mktemp("real") / model_id.split("/")[-1].lower(),
            layers=1,
            vocab_size=VOCAB_SIZE,
        )
        for model_id in estimates.ARCHITECTURES
    }


def test_shrunk_models_keep_the_real_architecture(shrunk_models):
    """The models the recipes train on differ from the published ones in the layer count and the vocabulary only."""
    estimates = _load("recipe_estimates")
    for model_id, path in shrunk_models.items():
        config = json.loads((Path(path) / "config.json").read_text())
        assert config["architectures"] == ["Qwen2ForCausalLM"]
        assert config["num_hidden_layers"] == 1 and config["vocab_size"] == VOCAB_SIZE
        for key, value in estimates.ARCHITECTURES[model_id].items():
            if key not in ("num_hidden_layers", "vocab_size"):
                saved = config["rope_parameters"][key] if key == "rope_theta" else config[key]  # transformers 5
                assert saved == value, (model_id, key)


def test_there_is_a_recipe_per_model_and_task():
    names = {(p.parent.name, p.stem) for p in RECIPES}
    for model in ("qwen2.5-0.5b", "qwen2.5-1.5b"):
        for task in ("arithmetic", "guess_number", "tool_use", "tic_tac_toe", "dpo_offline"):
            assert (model, task) in names


@pytest.mark.parametrize("recipe", RECIPES, ids=str)
def test_recipe_states_its_needs_measured_or_estimated(recipe):
    estimates = _load("recipe_estimates")
    text = (REPO / recipe).read_text()
    expected = estimates.recipe_expects_line(str(recipe), yaml.safe_load(text))
    assert expected in text.splitlines(), f"{recipe}: run python bench/recipe_estimates.py --write_configs"
    if str(recipe) in estimates.MEASURED:
        assert "measured on an NVIDIA H200" in expected and "estimated" not in expected
    else:
        assert "estimated by bench/recipe_estimates.py, not measured" in expected and "measured on" not in expected


def test_the_measured_recipe_states_the_measurement():
    estimates = _load("recipe_estimates")
    path = "scripts/configs/qwen2.5-0.5b/arithmetic.yaml"
    line = estimates.recipe_expects_line(path, yaml.safe_load((REPO / path).read_text()))
    assert "peak 11.6 GB" in line and "8.0-9.2 s per step" in line and "(the first 36 s)" in line
    assert "~27-31 min for 200 steps" in line  # 200 x 8.0 s .. 200 x 9.2 s


@pytest.mark.parametrize("recipe", RECIPES, ids=str)
def test_recipe_trains_one_step(recipe, shrunk_models, tmp_path, monkeypatch, capsys):
    config = yaml.safe_load((REPO / recipe).read_text())
    dpo = recipe.stem.startswith("dpo")
    script = _load("train_dpo" if dpo else "train_grpo")
    import trl_envs.tiny_model

    monkeypatch.setattr(trl_envs.tiny_model, "tiny_model_path", lambda *a, **k: pytest.fail("demo model used"))
    out = tmp_path / "run"
    argv = [
        "--config",
        str(REPO / recipe),
        "--model_name_or_path",
        shrunk_models[config["model_name_or_path"]],
        "--output_dir",
        str(out),
        "--max_steps",
        "1",
        "--per_device_train_batch_size",
        "2",
        "--gradient_accumulation_steps",
        "1",
        "--use_cpu",
        "true",
        "--bf16",
        "false",
        "--dtype",
        "float32",
        "--activation_checkpointing",
        "false",
        "--card_eval",
        "false",
        "--save_strategy",
        "no",
        "--logging_steps",
        "1",
        "--report_to",
        "none",
    ]
    if not dpo:
        argv += [
            "--num_generations",
            "2",
            "--max_completion_length",
            "4",
            "--max_turns",
            "2",
            "--max_tokens_per_trajectory",
            "8",
            "--per_device_eval_batch_size",
            "2",
        ]
    _, parsed, _ = script.parse_args(argv)
    settings = capsys.readouterr().out
    assert "demo recipe" not in settings  # a real model never gets the demo model's recipe
    assert re.search(r"\n  learning_rate +\S+ +\(config ", settings), settings  # the recipe's, and said so
    script.main(*parsed)
    history = json.loads((out / "log_history.json").read_text())
    assert any(h.get("step") == 1 for h in history), history
    assert (out / "trainer_state.json").exists()
