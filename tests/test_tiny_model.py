"""Tests of trl_envs.tiny_model: the offline tiny chat model (build, cache, locking, tokenizer, template, warm start).

The real model is built once per module (about half a minute on two CPU cores); the cache and locking tests that need
many builds swap the warm-start subprocess for a fake one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_envs import tiny_model
from trl_envs.envs.arithmetic import demonstrations as arithmetic_demos
from trl_envs.tiny_model import IM_END, IM_START, MARKER_FILE, PAD, build_tiny_model, default_tiny_model_path

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """Build the real model once for this module; record the path and the wall time of the build."""
    target = tmp_path_factory.mktemp("tiny") / "tiny-chat"
    start = time.monotonic()
    path = build_tiny_model(str(target))
    return {"path": path, "seconds": time.monotonic() - start}


@pytest.fixture(scope="module")
def tokenizer(built):
    return AutoTokenizer.from_pretrained(built["path"])


@pytest.fixture(scope="module")
def model(built):
    return AutoModelForCausalLM.from_pretrained(built["path"]).eval()


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


def test_build_is_complete_and_loads(built, tokenizer, model):
    path = Path(built["path"])
    assert path.is_dir() and (path / MARKER_FILE).is_file()
    marker = json.loads((path / MARKER_FILE).read_text())
    assert marker["seed"] == 0
    assert not [p.name for p in path.parent.iterdir() if ".building-" in p.name]  # staging dir was renamed away
    assert model.config.model_type == "qwen2"
    assert model.dtype == torch.float32
    assert model.config.tie_word_embeddings
    assert model.config.vocab_size == len(tokenizer)
    assert 300 <= len(tokenizer) <= 1000


def test_build_records_its_time(built):
    """The marker records how long the build took (bench/default_run.py quotes it); how long that is depends on the
    machine and its load, so it is printed, not asserted."""
    marker = json.loads((Path(built["path"]) / MARKER_FILE).read_text())
    print(f"tiny model build: {built['seconds']:.1f}s wall, {marker['build_seconds']}s in the builder")
    assert 0 < marker["build_seconds"] <= built["seconds"] + 1


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


def test_warm_start_leaves_room_for_rl(built):
    """... but not everything (the build's own evaluation: 100 questions sampled at temperature 1)."""
    evaluation = json.loads((Path(built["path"]) / MARKER_FILE).read_text())["warm_start_eval"]
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


# -- caching, locking, CLI -----------------------------------------------------------------------------------------


def test_second_call_reuses_the_build(built, monkeypatch):
    marker = Path(built["path"]) / MARKER_FILE
    mtime = marker.stat().st_mtime_ns

    def no_rebuild(directory, seed, name):
        raise AssertionError("a finished build must not be rebuilt")

    monkeypatch.setattr(tiny_model, "_run_build_subprocess", no_rebuild)
    start = time.monotonic()
    assert build_tiny_model(built["path"]) == built["path"]
    assert build_tiny_model(built["path"], seed=5) == built["path"]  # the seed only matters for a fresh build
    assert time.monotonic() - start < 5
    assert marker.stat().st_mtime_ns == mtime


def test_cli_prints_only_the_path(built):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    result = subprocess.run(
        [sys.executable, "-m", "trl_envs.tiny_model", "--output_dir", built["path"]],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert result.stdout == built["path"] + "\n"


def test_default_path_honours_trl_envs_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TRL_ENVS_CACHE", str(tmp_path))
    assert default_tiny_model_path() == str(tmp_path / "tiny-chat-v1")
    monkeypatch.delenv("TRL_ENVS_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_tiny_model_path() == str(tmp_path / ".cache" / "trl_envs" / "tiny-chat-v1")


class _FakeBuilder:
    """Stands in for the warm-start subprocess: slow enough for callers to overlap, counts the builds."""

    def __init__(self, seconds: float = 0.3):
        self.seconds, self.calls, self._lock = seconds, 0, threading.Lock()

    def __call__(self, directory: Path, seed: int, name: str = tiny_model.MODEL_NAME) -> None:
        with self._lock:
            self.calls += 1
        time.sleep(self.seconds)
        (directory / "weights.txt").write_text(f"seed {seed}\n")
        (directory / MARKER_FILE).write_text("{}\n")


def test_concurrent_callers_build_once(monkeypatch, tmp_path):
    fake = _FakeBuilder()
    monkeypatch.setattr(tiny_model, "_run_build_subprocess", fake)
    target = tmp_path / "model"
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(build_tiny_model(str(target)))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [str(target)] * 4
    assert fake.calls == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.lock", "model"]  # no staging dirs left behind


def test_force_rebuilds_and_replaces(monkeypatch, tmp_path):
    fake = _FakeBuilder(seconds=0)
    monkeypatch.setattr(tiny_model, "_run_build_subprocess", fake)
    target = tmp_path / "model"
    build_tiny_model(str(target), seed=1)
    (target / "stale.txt").write_text("left over\n")
    assert build_tiny_model(str(target), force=True, seed=2) == str(target)
    assert fake.calls == 2
    assert (target / "weights.txt").read_text() == "seed 2\n"
    assert not (target / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.lock", "model"]


def test_existing_empty_dir_is_used(monkeypatch, tmp_path):
    monkeypatch.setattr(tiny_model, "_run_build_subprocess", _FakeBuilder(seconds=0))
    target = tmp_path / "model"
    target.mkdir()
    assert build_tiny_model(str(target)) == str(target)
    assert (target / MARKER_FILE).is_file()


def test_foreign_directory_is_never_overwritten_without_force(monkeypatch, tmp_path):
    monkeypatch.setattr(tiny_model, "_run_build_subprocess", _FakeBuilder(seconds=0))
    target = tmp_path / "model"
    target.mkdir()
    (target / "precious.txt").write_text("mine\n")
    with pytest.raises(FileExistsError):
        build_tiny_model(str(target))
    assert (target / "precious.txt").read_text() == "mine\n"


def test_scratch_dirs_of_a_killed_builder_are_removed(monkeypatch, tmp_path):
    monkeypatch.setattr(tiny_model, "_run_build_subprocess", _FakeBuilder(seconds=0))
    (tmp_path / ".model.building-abc123").mkdir()
    (tmp_path / ".model.building-abc123" / "model.safetensors").write_text("half written")
    (tmp_path / ".model.old-def456").mkdir()
    build_tiny_model(str(tmp_path / "model"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.lock", "model"]


def test_failed_build_leaves_nothing_behind(monkeypatch, tmp_path):
    def failing(directory, seed, name):
        (directory / "half.bin").write_text("partial")
        raise RuntimeError("boom")

    monkeypatch.setattr(tiny_model, "_run_build_subprocess", failing)
    with pytest.raises(RuntimeError, match="boom"):
        build_tiny_model(str(tmp_path / "model"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".model.lock"]
