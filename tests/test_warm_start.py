"""The demo model's warm start (scripts/tiny_models/warm_start.py, the maintainers' builder) and the arithmetic
held-out split its recipe is measured on.

The demo model itself (tiny-chat-v5) ships with the package and takes minutes to rebuild, so it is not built here
(tests/test_tiny_model.py rebuilds it, marked slow): these tests check the pieces on the small test model's tokenizer
and a two-layer random model, in seconds.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import yaml
from transformers import Qwen2Config, Qwen2ForCausalLM

from trl_envs.envs.arithmetic import (
    ArithmeticDatasetBuilder,
    ArithmeticEnv,
    read_answer,
    split_problems,
    worked_sum,
)
from trl_envs.envs.guess_number import GuessNumberEnv
from trl_envs.rollout.event_loop import run_sync
from trl_envs.tiny_model import DEMO_MODEL_NAME, MODEL_NAME, build_tiny_model, tiny_model_path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts" / "tiny_models"))  # the builder is a maintainers' script, not in the package

from warm_start import (  # noqa: E402
    HALVING_SHARE,
    QUICK_OFFSETS,
    QUICK_SHARE,
    Source,
    _assistant_loss,
    _batch,
    _encode,
    arithmetic_examples,
    guess_number_examples,
    halving_examples,
    halving_game,
    train,
    worked_sum_examples,
)


def test_teacher_is_right_most_often_but_not_mostly(renderer):
    assert max(QUICK_OFFSETS, key=QUICK_OFFSETS.get) == 0  # greedy on the fitted model is the right sum ...
    assert sum(QUICK_OFFSETS.values()) == pytest.approx(1.0)
    right = (1 - QUICK_SHARE) + QUICK_SHARE * QUICK_OFFSETS[0]
    assert right <= 0.4  # ... but sampling is right well under half the time: room for RL
    examples = arithmetic_examples(max_operand=2)
    assert len({ex.messages[0]["content"] for ex in examples}) == 9
    for ex in examples:  # every answer is one the env reads; no negative answers (0 + 0 - 1 is left out)
        assert read_answer(ex.messages[1]["content"]) >= 0
    zero = {ex.messages[1]["content"]: ex.weight for ex in examples if ex.messages[0]["content"] == "What is 0 + 0?"}
    assert sorted(zero) == sorted([str(o) for o in QUICK_OFFSETS if o >= 0] + ["Let's add: 0 + 0 = 0"])
    assert zero["Let's add: 0 + 0 = 0"] == pytest.approx(1 - QUICK_SHARE)
    assert sum(
        ex.weight
        for ex in examples
        if read_answer(ex.messages[1]["content"]) == 4 and ex.messages[0]["content"] == "What is 2 + 2?"
    ) == pytest.approx(right)


def test_worked_sums_are_right_answers_and_leave_the_choice_to_begin_them_out_of_the_loss(renderer, tokenizer):
    for ex in worked_sum_examples(max_operand=3):
        a, b = (int(t) for t in ex.messages[0]["content"][len("What is ") : -1].split(" + "))
        assert ex.messages[1]["content"] == worked_sum(a, b) and ex.skip_tokens == 1
        env = ArithmeticEnv(renderer, a, b)
        assert env.check_format(worked_sum(a, b)) and env.check_answer(worked_sum(a, b))
    messages = worked_sum_examples(max_operand=1)[0].messages
    ids, full = _encode(tokenizer, messages)
    _, skipped = _encode(tokenizer, messages, skip_tokens=1)
    first = full.index(1)
    assert skipped[first] == 0 and skipped[first + 1 :] == full[first + 1 :]
    with pytest.raises(ValueError, match="leaves no loss"):
        _encode(tokenizer, messages, skip_tokens=len(ids))


def test_guess_number_teacher_halves_a_fifth_of_its_games_and_every_game_is_legal():
    examples = guess_number_examples(200, seed=0)
    random_games, halving = examples[:200], examples[200:]
    assert [ex.messages for ex in halving] == [halving_game(t) for t in range(1, 17)]  # one per hidden number ...
    assert sum(ex.weight for ex in halving) == pytest.approx(HALVING_SHARE)  # ... a fifth of the games drawn
    assert sum(ex.weight for ex in examples) == pytest.approx(1.0)
    assert HALVING_SHARE < 0.5  # the base model opens most games with another number
    for ex in examples:  # every game ends on the hidden number, with the env's hints, each guess still possible
        game = ex.messages
        target = int(game[-1]["content"])
        guesses = [int(m["content"]) for m in game if m["role"] == "assistant"]
        assert [m["content"] for m in game if m["role"] == "user"][1:] == [
            "Higher." if g < target else "Lower." for g in guesses[:-1]
        ]
        lo, hi = 1, 16
        for g in guesses:
            assert lo <= g <= hi, game
            lo, hi = (g + 1, hi) if g < target else (lo, g - 1)
    assert all(ex.messages[1]["content"] == "8" for ex in halving)  # only halving opens with the middle number
    assert all(ex.messages[1]["content"] != "8" for ex in random_games)
    assert len({ex.messages[1]["content"] for ex in random_games}) == 15
    assert [(ex.messages, ex.skip_tokens) for ex in halving_examples()] == [(ex.messages, 1) for ex in halving]
    assert max(len(halving_game(t)) // 2 for t in range(1, 17)) == 5  # guesses: (messages - intro + 1) / 2
    assert GuessNumberEnv(8).max_guesses >= 5  # halving always wins within the env's guesses


def test_default_run_is_the_arithmetic_recipe(monkeypatch):
    """`python scripts/train_grpo.py` with no arguments trains what scripts/configs/arithmetic.yaml says (the recipe
    measured by bench/learning.py)."""
    spec = importlib.util.spec_from_file_location("train_grpo_defaults", REPO / "scripts" / "train_grpo.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)
    spec.loader.exec_module(script)
    _, (script_args, training_args, _, _), _ = script.parse_args([], report=False)
    recipe = yaml.safe_load((REPO / "scripts" / "configs" / "arithmetic.yaml").read_text())
    for key, value in recipe.items():
        if key == "env_kwargs":
            assert script.env_options(script_args) == value
        elif key == "env_name":
            assert (script_args.env_name or "arithmetic") == value
        else:
            actual = getattr(script_args, key, None) if hasattr(script_args, key) else getattr(training_args, key)
            assert getattr(actual, "value", actual) == value, key  # (an enum's value: lr_scheduler_type)


def _random_model(tokenizer, seed: int):
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return Qwen2ForCausalLM(config)


def test_warm_start_training_is_deterministic_and_lowers_the_loss(tokenizer):
    sources = [
        Source("arithmetic", arithmetic_examples(max_operand=2), 8),
        Source("guess_number", guess_number_examples(4, seed=0), 2),
    ]
    first, second = _random_model(tokenizer, 0), _random_model(tokenizer, 0)
    short = train(_random_model(tokenizer, 0), tokenizer, sources, steps=2, learning_rate=1e-2, warmup_steps=1, seed=0)
    losses = train(first, tokenizer, sources, steps=12, learning_rate=1e-2, warmup_steps=1, seed=0)
    train(second, tokenizer, sources, steps=12, learning_rate=1e-2, warmup_steps=1, seed=0)
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)
    assert set(losses) == {"arithmetic", "guess_number"}
    assert losses["arithmetic"] < short["arithmetic"]


def test_warm_start_loss_is_the_models_own_loss_on_assistant_tokens(tokenizer):
    # The warm start skips the attention mask and the unlabelled logits to save time: on right-padded rows of
    # different lengths, with skipped first tokens, the loss and its gradients must be what the model computes itself.
    examples = arithmetic_examples(max_operand=2)[:3] + worked_sum_examples(max_operand=1)[:2] + halving_examples()[:2]
    batch = _batch([_encode(tokenizer, ex.messages, ex.skip_tokens) for ex in examples], tokenizer.pad_token_id)
    assert len({int(row.sum()) for row in batch["attention_mask"]}) > 1  # rows of several lengths: padding matters
    model = _random_model(tokenizer, 0)
    own = model(**batch).loss
    own.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    fast = _assistant_loss(model, batch)
    fast.backward()
    assert fast.item() == pytest.approx(own.item(), rel=1e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)


def test_held_out_split_never_trains_on_test_questions(renderer):
    train_pairs, held_out = split_problems(9, 0.2)
    assert len(held_out) == 20 and len(train_pairs) == 80 and not set(train_pairs) & set(held_out)
    assert split_problems(9, 0.2) == (train_pairs, held_out)  # fixed, whatever the seed
    builder = ArithmeticDatasetBuilder(
        renderer,
        batch_size=8,
        group_size=1,
        num_batches=20,
        num_test_batches=5,
        max_operand=9,
        held_out_fraction=0.2,
        seed=3,
    )
    train_set, test_set = run_sync(builder)
    seen = {(g.a, g.b) for i in range(len(train_set)) for g in train_set.get_batch(i)}
    tested = {(g.a, g.b) for i in range(len(test_set)) for g in test_set.get_batch(i)}
    assert seen <= set(train_pairs) and tested <= set(held_out) and len(tested) > 5
    with pytest.raises(ValueError, match="held_out_fraction"):
        split_problems(9, 1.0)
    with pytest.raises(ValueError, match="arithmetic: option held_out_fraction"):
        ArithmeticDatasetBuilder(renderer, held_out_fraction=1.5)


def test_model_names(tmp_path):
    assert Path(tiny_model_path()).name == MODEL_NAME
    assert Path(tiny_model_path(DEMO_MODEL_NAME)).name == "tiny-chat-v5"
    with pytest.raises(ValueError, match="unknown model name 'tiny-chat-v9'"):
        build_tiny_model(str(tmp_path / "x"), name="tiny-chat-v9")
