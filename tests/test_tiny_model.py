"""Tests of trl_envs.tiny_model: the tiny chat models that ship with the package (their files, build record,
tokenizer, template and warm start), copies of them, and the builder's quick check of the recipe (slow: seconds).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import trl_envs
from trl_envs.envs.arithmetic import demonstrations as arithmetic_demos
from trl_envs.model_names import DEMO_MODEL_NAME, MODEL_NAME, MODEL_NAMES
from trl_envs.tiny_model import BUILD_RECORD, build_record, build_tiny_model, tiny_model_path

REPO_ROOT = Path(__file__).resolve().parent.parent
IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
BUILDER = REPO_ROOT / "scripts" / "tiny_models" / "build_tiny_models.py"


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(tiny_model_path())


@pytest.fixture(scope="module")
def model():
    return AutoModelForCausalLM.from_pretrained(tiny_model_path()).eval()


def _sample(model, tokenizer, conversations, seed: int = 0, max_new_tokens: int = 8) -> list[list[int]]:
    """Sampled reply tokens (temperature 1) per conversation, from a left-padded batch, cut after the first EOS."""
    prompts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    tokenizer.padding_side = "left"
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            **batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens
        )
    replies = []
    for row in out[:, batch["input_ids"].shape[1] :].tolist():
        replies.append(row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row)
    return replies


def _bare_integer(tokenizer, reply: list[int]) -> str | None:
    """The reply's text if it is a bare integer followed by the EOS token, else None."""
    if not reply or reply[-1] != tokenizer.eos_token_id:
        return None
    text = tokenizer.decode(reply[:-1])
    return text if text.isdigit() else None


# -- the built directory -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_shipped_model_is_package_data_and_loads(name):
    path = Path(tiny_model_path(name))
    assert path.parent == Path(trl_envs.__file__).parent / "assets"  # in the package: no cache, no build
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "qwen2"
    assert model.dtype == torch.float32
    assert model.config.tie_word_embeddings == (name == MODEL_NAME)  # the demo model's output layer is untied
    assert model.config.vocab_size == len(tokenizer)
    assert 300 <= len(tokenizer) <= 1000
    assert sum(f.stat().st_size for f in path.iterdir()) < 1_000_000


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_build_record_says_how_and_names_the_very_files(name):
    """build.json: seed, recipe, build figures, and the sha256 of every file shipped next to it (so a changed file
    without a rebuild shows)."""
    record = build_record(name)
    assert record["name"] == name and record["seed"] == 0
    assert record["recipe"]["train_steps"] > 0 and record["build_seconds"] > 0
    assert set(record["warm_start_eval"]) >= {"arithmetic_format", "arithmetic_correct", "guess_in_range"}
    assert len(record["demonstrations_sha256"]) == 64 and record["train_loss_at_step"]["1"]  # the quick check's
    path = Path(tiny_model_path(name))
    files = {f.name for f in path.iterdir() if f.name != BUILD_RECORD}
    assert set(record["sha256"]) == files
    for file in files:
        assert hashlib.sha256((path / file).read_bytes()).hexdigest() == record["sha256"][file], file


def test_every_shipped_file_is_package_data_in_the_wheel():
    """pyproject's package-data patterns cover every file under trl_envs/assets (what setuptools puts in the wheel
    and the editable install)."""
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's TOML reader")
    patterns = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = Path(trl_envs.__file__).parent
    files = [p.relative_to(package).as_posix() for p in (package / "assets").rglob("*") if p.is_file()]
    assert len(files) >= 3 * 4
    missed = [f for f in files if not any(fnmatch.fnmatchcase(f, pat) for pat in patterns["trl_envs"])]
    assert not missed, f"not package data (pyproject [tool.setuptools.package-data]): {missed}"
    assert sum((package / f).stat().st_size for f in files) < 3_000_000


def test_the_package_never_imports_the_builder():
    """The builder is a maintainers' script: no module of the package imports it or its warm start."""
    import ast

    package = Path(trl_envs.__file__).parent
    builder = {"warm_start", "build_tiny_models", "scripts"}
    for module in package.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:  # relative imports stay in the package
                names = [node.module or ""]
            assert not {n.split(".")[0] for n in names} & builder, f"{module}:{node.lineno} imports the builder"


def test_special_tokens(tokenizer, model):
    assert tokenizer.eos_token == IM_END
    assert tokenizer.pad_token == PAD
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    for token in (IM_START, IM_END, PAD):
        ids = tokenizer.encode(token, add_special_tokens=False)
        assert len(ids) == 1 and ids[0] in tokenizer.all_special_ids
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert tokenizer.encode("hello", add_special_tokens=True) == tokenizer.encode("hello", add_special_tokens=False)


def test_digits_are_single_tokens(tokenizer):
    ids = tokenizer.encode("What is 12 + 345?", add_special_tokens=False)
    pieces = [tokenizer.decode([i]) for i in ids]
    assert [p for p in pieces if any(ch.isdigit() for ch in p)] == ["1", "2", "3", "4", "5"]
    assert tokenizer.decode(ids) == "What is 12 + 345?"


def test_chat_template_is_chatml(tokenizer):
    assert tokenizer.chat_template
    conversation = [
        {"role": "user", "content": "Guess my number between 1 and 16."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Higher."},
    ]
    rendered = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    assert rendered == (
        "<|im_start|>user\nGuess my number between 1 and 16.<|im_end|>\n"
        "<|im_start|>assistant\n7<|im_end|>\n"
        "<|im_start|>user\nHigher.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    without_prompt = tokenizer.apply_chat_template(conversation, add_generation_prompt=False, tokenize=False)
    assert rendered == without_prompt + "<|im_start|>assistant\n"
    system = tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}], tokenize=False)
    assert system == "<|im_start|>system\nBe brief.<|im_end|>\n"


def test_chat_template_marks_assistant_turns_for_the_loss(tokenizer):
    """The ``{% generation %}`` markers cover the assistant content *and* its ``<|im_end|>`` (so SFT learns to stop)."""
    out = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "5"}],
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    masked = [t for t, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert tokenizer.decode(masked) == "5<|im_end|>"


def test_renderer_accepts_the_tokenizer(tokenizer):
    from trl_envs.core.renderer import Renderer

    renderer = Renderer(tokenizer)
    assert renderer.end_of_turn_token_id == tokenizer.eos_token_id
    suffix = renderer.render_suffix([{"role": "user", "content": "Lower."}])
    assert tokenizer.decode(suffix) == "\n<|im_start|>user\nLower.<|im_end|>\n<|im_start|>assistant\n"


# -- warm start ----------------------------------------------------------------------------------------------------


def test_warm_start_answers_arithmetic_with_bare_integers(model, tokenizer):
    questions = arithmetic_demos(64, seed=123)
    replies = _sample(model, tokenizer, [convo[:1] for convo in questions])
    answers = [_bare_integer(tokenizer, reply) for reply in replies]
    well_formed = sum(a is not None for a in answers)
    correct = sum(a == convo[1]["content"] for a, convo in zip(answers, questions))
    print(f"warm start, arithmetic at temperature 1: {well_formed}/64 bare integers, {correct}/64 correct")
    assert well_formed >= 0.85 * len(questions)
    assert correct >= 3  # it has learned something beyond the format ...


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_warm_start_leaves_room_for_rl(name):
    """... but not everything (the build's own evaluation: 100 questions sampled at temperature 1)."""
    evaluation = build_record(name)["warm_start_eval"]
    assert evaluation["arithmetic_format"] >= 0.85
    assert 0.05 <= evaluation["arithmetic_correct"] <= 0.85
    assert evaluation["guess_in_range"] >= 0.85


def test_warm_start_guesses_numbers_in_range(model, tokenizer):
    games = [
        [{"role": "user", "content": "Guess my number between 1 and 16."}],
        [
            {"role": "user", "content": "Guess my number between 1 and 16."},
            {"role": "assistant", "content": "8"},
            {"role": "user", "content": "Higher."},
        ],
    ]
    replies = _sample(model, tokenizer, games * 16, seed=1)
    guesses = [_bare_integer(tokenizer, reply) for reply in replies]
    in_range = [g for g in guesses if g is not None and 1 <= int(g) <= 16]
    assert len(in_range) >= 0.85 * len(replies)


# -- copies, the command, the rebuild -------------------------------------------------------------------------------


def test_build_tiny_model_returns_the_shipped_model_or_a_copy(tmp_path):
    assert build_tiny_model() == tiny_model_path()
    assert build_tiny_model(name=DEMO_MODEL_NAME) == tiny_model_path(DEMO_MODEL_NAME)
    copy = build_tiny_model(str(tmp_path / "mine"))
    assert copy == str(tmp_path / "mine")
    shipped = Path(tiny_model_path())
    assert sorted(p.name for p in Path(copy).iterdir()) == sorted(p.name for p in shipped.iterdir())
    assert (Path(copy) / "model.safetensors").read_bytes() == (shipped / "model.safetensors").read_bytes()
    assert build_tiny_model(copy) == copy  # a copy already there is reused
    record = Path(copy) / BUILD_RECORD  # a copy made when the build record said less: reused, its record refreshed
    record.write_text(
        json.dumps({k: v for k, v in json.loads(record.read_text()).items() if k != "train_loss_at_step"})
    )
    assert build_tiny_model(copy) == copy and record.read_text() == (shipped / BUILD_RECORD).read_text()
    (Path(copy) / "model.safetensors").write_bytes(b"other weights")
    record.write_text("{}")
    with pytest.raises(FileExistsError, match="holds no copy"):  # other files: not a copy, never overwritten
        build_tiny_model(copy)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]  # no scratch folders left behind


def test_a_foreign_directory_is_never_overwritten_without_force(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "precious.txt").write_text("mine\n")
    with pytest.raises(FileExistsError, match="holds no copy of tiny-chat-v1"):
        build_tiny_model(str(target))
    assert (target / "precious.txt").read_text() == "mine\n"
    build_tiny_model(str(target), force=True)
    assert not (target / "precious.txt").exists() and (target / BUILD_RECORD).is_file()


def test_another_seed_points_to_the_builder():
    with pytest.raises(ValueError, match="built with seed 0, not 3.*build_tiny_models.py"):
        build_tiny_model(seed=3)


def test_cli_prints_only_the_path(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    for argv, expected in (
        ([], tiny_model_path(DEMO_MODEL_NAME)),
        (["--name", MODEL_NAME, "--output_dir", str(tmp_path / "m")], str(tmp_path / "m")),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "trl_envs.tiny_model", *argv],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=True,
        )
        assert result.stdout == expected + "\n"


@pytest.fixture(scope="module")
def quick_check() -> dict[str, dict]:
    """The builder's ``--quick_check`` of every shipped model, in one process (the libraries load once): each model's
    comparison by name, and the exit status under ``"returncode"``."""
    names = [arg for name in MODEL_NAMES for arg in ("--name", name)]
    result = subprocess.run(
        [sys.executable, str(BUILDER), "--quick_check", *names], capture_output=True, text=True, timeout=600
    )
    assert result.stdout, result.stderr[-2000:]
    return {
        "returncode": result.returncode,
        **{comparison["name"]: comparison for comparison in json.loads(result.stdout)},
    }


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_the_recipe_still_makes_the_shipped_model(name, quick_check):
    """The recipe in scripts/tiny_models/ still makes the model the package ships, checked in seconds: the
    demonstrations, the recipe's settings, the tokenizer, chat template and configs are exactly the shipped build's,
    and the first warm-start steps' losses are those the shipped build recorded, within the builder's tolerance for
    another CPU's rounding (a changed learning rate, data mix, initialisation or seed is far outside it). The full
    rebuild and evaluation, minutes, is the maintainers' ``build_tiny_models.py --check``."""
    comparison = quick_check[name]
    print(json.dumps(comparison, indent=2))
    hint = (
        f"{name}: the recipe no longer starts the shipped build. If the libraries differ from the build's "
        f"({comparison['built_with']}), they may start it differently without a change of the recipe: run the full "
        f"`python scripts/tiny_models/build_tiny_models.py --check --name {name}`.\n{json.dumps(comparison, indent=2)}"
    )
    assert comparison["steps"] >= 30 and 0 < comparison["loss_tolerance"] <= 1e-3
    assert set(comparison["train_loss_at_step"]) == {"1", "10", "20", "30"}
    assert comparison["demonstrations_sha256"]["same"], hint
    assert comparison["same_recipe_settings"], hint
    assert all(comparison["same_files"].values()) and len(comparison["same_files"]) == 5, hint
    assert comparison["largest_relative_difference"] <= comparison["loss_tolerance"], hint
    assert comparison["same_recipe"] and quick_check["returncode"] == 0, hint
