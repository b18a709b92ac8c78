"""The demo model's warm start (trl_envs.warm_start) and the arithmetic held-out split its recipe is measured on.

The demo model itself (tiny-chat-v2) takes minutes to build, so it is not built here: these tests check the pieces
on the small test model's tokenizer and a two-layer random model, in seconds.
"""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from trl_envs import Renderer
from trl_envs.envs.arithmetic import ArithmeticDatasetBuilder, split_problems
from trl_envs.rollout.engine import run_sync
from trl_envs.tiny_model import DEMO_MODEL_NAME, MODEL_NAME, build_tiny_model, default_tiny_model_path
from trl_envs.warm_start import SLOPPY_OFFSETS, Source, guess_number_examples, sloppy_arithmetic_examples, train


def test_sloppy_teacher_is_right_most_often_but_not_mostly():
    assert max(SLOPPY_OFFSETS, key=SLOPPY_OFFSETS.get) == 0  # greedy on the fitted model is the right sum ...
    assert SLOPPY_OFFSETS[0] <= 0.4  # ... but sampling is right well under half the time: room for RL
    assert sum(SLOPPY_OFFSETS.values()) == pytest.approx(1.0)
    examples = sloppy_arithmetic_examples(max_operand=2)
    questions = {ex.messages[0]["content"] for ex in examples}
    assert len(questions) == 9
    for ex in examples:
        assert int(ex.messages[1]["content"]) >= 0  # no negative answers (0 + 0 - 1 is left out)
    zero = [ex for ex in examples if ex.messages[0]["content"] == "What is 0 + 0?"]
    assert sorted(ex.messages[1]["content"] for ex in zero) == ["0", "1", "2"]


def _random_model(tokenizer, seed: int):
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    return Qwen2ForCausalLM(config)


def test_warm_start_training_is_deterministic_and_lowers_the_loss(tokenizer):
    sources = [Source("arithmetic", sloppy_arithmetic_examples(max_operand=2), 8),
               Source("guess_number", guess_number_examples(4, seed=0), 2)]
    first, second = _random_model(tokenizer, 0), _random_model(tokenizer, 0)
    short = train(_random_model(tokenizer, 0), tokenizer, sources, steps=2, learning_rate=1e-2, warmup_steps=1,
                  seed=0)
    losses = train(first, tokenizer, sources, steps=12, learning_rate=1e-2, warmup_steps=1, seed=0)
    train(second, tokenizer, sources, steps=12, learning_rate=1e-2, warmup_steps=1, seed=0)
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)
    assert set(losses) == {"arithmetic", "guess_number"}
    assert losses["arithmetic"] < short["arithmetic"]


def test_held_out_split_never_trains_on_test_questions(renderer):
    train_pairs, held_out = split_problems(9, 0.2)
    assert len(held_out) == 20 and len(train_pairs) == 80 and not set(train_pairs) & set(held_out)
    assert split_problems(9, 0.2) == (train_pairs, held_out)  # fixed, whatever the seed
    builder = ArithmeticDatasetBuilder(renderer, batch_size=8, group_size=1, num_batches=20, num_test_batches=5,
                                       max_operand=9, held_out_fraction=0.2, seed=3)
    train_set, test_set = run_sync(builder)
    seen = {(g.a, g.b) for i in range(len(train_set)) for g in train_set.get_batch(i)}
    tested = {(g.a, g.b) for i in range(len(test_set)) for g in test_set.get_batch(i)}
    assert seen <= set(train_pairs) and tested <= set(held_out) and len(tested) > 5
    with pytest.raises(ValueError, match="held_out_fraction"):
        split_problems(9, 1.0)
    with pytest.raises(ValueError, match="arithmetic: option held_out_fraction"):
        ArithmeticDatasetBuilder(renderer, held_out_fraction=1.5)


def test_model_names(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_ENVS_CACHE", str(tmp_path))
    assert default_tiny_model_path() == str(tmp_path / MODEL_NAME)
    assert default_tiny_model_path(DEMO_MODEL_NAME) == str(tmp_path / "tiny-chat-v2")
    with pytest.raises(ValueError, match="unknown model name 'tiny-chat-v9'"):
        build_tiny_model(str(tmp_path / "x"), name="tiny-chat-v9")
