"""The warm start of the demo model ``tiny-chat-v5`` (``build_tiny_models.py`` builds it): what it is shown and how.

RL can only sharpen what a model already sometimes does. So the warm start teaches each env's *format* and an
*approximate* skill, and leaves the exact skill to reinforcement learning:

* ``arithmetic``: two ways of answering ``What is a + b?`` (operands 0..9). Most of the time
  (:data:`QUICK_SHARE`) the teacher answers **quickly**, with a bare number that is the right sum only about a
  third of the time and otherwise off by 1 or 2 (:data:`QUICK_OFFSETS`); sometimes it **works the sum out**
  (``Let's add: 3 + 4 = 7``), and then it is always right. Fitted to that, the model's most likely answer (its greedy
  answer) is the right quick one, but sampled at temperature 1 it is right only ~37% of the time: GRPO groups have
  reward variance on every question, and what RL has to learn, to work the sum out every time, is a choice the model
  must earn from rewards, on every question at once (the choice is the same for all of them, which is why it carries
  over to questions held out of RL training). This is the shape of RL on large models too: it rarely teaches new
  facts, it makes the model do reliably what it already does sometimes.
* ``guess_number`` (numbers 1..16): most games (``1 -`` :data:`HALVING_SHARE`) are played by a guesser whose every
  guess is uniform over the numbers still possible (consistent with the hints, ~4.8 guesses a game); a fifth are
  played by **halving** (always the middle of the numbers still possible: at most 5 guesses, always a win). Only
  halving opens with the middle number, 8, so, as in arithmetic, the fitted model makes its choice at its first token
  and then follows through (a second source, :func:`halving_examples`, teaches the follow-through); what RL has to
  learn is to open every game by halving.

The examples are weighted (a question's answers with the teacher's probabilities) and trained with a plain PyTorch
loop: batches drawn by weight from a seeded generator, loss on the assistant tokens only. This is several times
faster than TRL's ``SFTTrainer`` on a model this small (whose steps are all overhead) and fully deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trl_envs.core.renderer import Message
from trl_envs.envs.arithmetic import question, worked_sum
from trl_envs.envs.guess_number import demonstrations as guess_number_demonstrations
from trl_envs.envs.guess_number import played_game

QUICK_SHARE = 0.82
"""How often the arithmetic teacher answers quickly (a bare number); the rest of the time it works the sum out."""

QUICK_OFFSETS: dict[int, float] = {0: 0.2, -1: 0.19, 1: 0.19, -2: 0.15, 2: 0.15, -3: 0.06, 3: 0.06}
"""Probability that the teacher's quick answer is off by each offset (0: the right sum). The right sum is the single
most likely answer, so the fitted model's greedy answer is right."""


@dataclass(frozen=True)
class WeightedExample:
    """One conversation and its sampling weight within its source. The loss covers the assistant tokens except the
    first ``skip_tokens`` of the first assistant message: such an example teaches how to *finish* an answer begun
    that way without making the model any more likely to begin it."""

    messages: list[Message]
    weight: float = 1.0
    skip_tokens: int = 0


def arithmetic_examples(max_operand: int = 9) -> list[WeightedExample]:
    """Every question with operands ``0..max_operand``, once per answer the teacher may give (each quick answer and
    the worked sum), weighted by the teacher's probability of giving it (negative quick answers are left out and
    their weight dropped)."""
    examples = []
    for a in range(max_operand + 1):
        for b in range(max_operand + 1):
            answers = {worked_sum(a, b): 1.0 - QUICK_SHARE}
            answers.update(
                {
                    str(a + b + offset): QUICK_SHARE * probability
                    for offset, probability in QUICK_OFFSETS.items()
                    if a + b + offset >= 0
                }
            )
            examples += [
                WeightedExample(
                    [{"role": "user", "content": question(a, b)}, {"role": "assistant", "content": answer}], weight
                )
                for answer, weight in answers.items()
            ]
    return examples


def worked_sum_examples(max_operand: int = 9) -> list[WeightedExample]:
    """Every question with operands ``0..max_operand`` answered by working the sum out (:func:`worked_sum`), with the
    loss on all but the first answer token: the teacher, once it has begun to work a sum out, always finishes it right,
    but these examples do not change how often the model begins to (that stays :data:`QUICK_SHARE`'s complement)."""
    return [
        WeightedExample(
            [{"role": "user", "content": question(a, b)}, {"role": "assistant", "content": worked_sum(a, b)}],
            skip_tokens=1,
        )
        for a in range(max_operand + 1)
        for b in range(max_operand + 1)
    ]


HALVING_SHARE = 0.2
"""How often the guess_number teacher plays a game by halving (always guessing the middle of the numbers still
possible); the rest of the time each of its guesses is uniform over the numbers still possible."""


def guess_number_examples(num: int, seed: int, low: int = 1, high: int = 16) -> list[WeightedExample]:
    """``num`` games of the consistent-but-random guesser (:func:`trl_envs.envs.guess_number.demonstrations`),
    together weighted ``1 - HALVING_SHARE``, and the halving game of every hidden number (:func:`halving_game`),
    together weighted :data:`HALVING_SHARE`. The random games never open with the middle number (those that would are
    left out): opening with it means halving, so the first guess is the model's choice of strategy, as the first
    token of an arithmetic answer is, and what RL has to learn is to open every game that way."""
    middle = (low + high) // 2
    random_games = [
        game for game in guess_number_demonstrations(2 * num, seed, low, high) if game[1]["content"] != str(middle)
    ][:num]
    halving = [halving_game(target, low, high) for target in range(low, high + 1)]
    return [WeightedExample(game, (1.0 - HALVING_SHARE) / len(random_games)) for game in random_games] + [
        WeightedExample(game, HALVING_SHARE / len(halving)) for game in halving
    ]


def halving_examples(low: int = 1, high: int = 16) -> list[WeightedExample]:
    """The halving game of every hidden number with no loss on its first guess: these teach how a game opened with
    the middle number goes on (always the middle of what is left) without making the model open that way any more
    often (that stays :data:`HALVING_SHARE`, plus the random games' openings)."""
    return [WeightedExample(halving_game(target, low, high), skip_tokens=1) for target in range(low, high + 1)]


def halving_game(target: int, low: int = 1, high: int = 16) -> list[Message]:
    """The game of the guesser that always guesses the middle of the numbers still possible."""
    return played_game(target, lambda lo, hi: (lo + hi) // 2, low, high)


@dataclass(frozen=True)
class Source:
    """A set of examples and how many of them (drawn by weight, with replacement) go into every training step."""

    name: str
    examples: Sequence[WeightedExample]
    per_step: int


def train(
    model,
    tokenizer,
    sources: Sequence[Source],
    *,
    steps: int,
    learning_rate: float,
    warmup_steps: int,
    seed: int,
    stop_after: int | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """Supervised fine-tuning of ``model`` on ``sources``: AdamW, linear warmup then cosine decay, gradient norm
    clipped to 1; every step one batch per source (separate forward passes, so short examples are not padded to long
    ones). Returns each source's mean loss over the last 10% of ``steps``.

    ``stop_after``: train only the first ``stop_after`` steps of the ``steps``-step run (same batches, same learning
    rate schedule), so the model and losses are those of the full run at that step; the return value then covers only
    the steps of that last 10% that were run (empty if none). ``on_step(step, losses)``, if given, is called after
    each step (``step`` counted from 1) with each source's loss on that step's batch (before the update), for the
    build record; it does not change the training."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    encoded = {
        source.name: [_encode(tokenizer, example.messages, example.skip_tokens) for example in source.examples]
        for source in sources
    }
    weights = {
        source.name: torch.tensor([example.weight for example in source.examples], dtype=torch.float64)
        for source in sources
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)

    def schedule(step: int) -> float:
        return min(1.0, (step + 1) / warmup_steps) * 0.5 * (1.0 + math.cos(math.pi * step / steps))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    tail = {source.name: [] for source in sources}
    model.train()
    for step in range(steps if stop_after is None else min(steps, stop_after)):
        step_losses = {}
        for source in sources:
            rows = torch.multinomial(weights[source.name], source.per_step, replacement=True, generator=generator)
            loss = _assistant_loss(
                model, _batch([encoded[source.name][i] for i in rows.tolist()], tokenizer.pad_token_id)
            )
            (loss * source.per_step / sum(s.per_step for s in sources)).backward()
            step_losses[source.name] = loss.item()
            if step >= steps - max(1, steps // 10):
                tail[source.name].append(step_losses[source.name])
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if on_step is not None:
            on_step(step + 1, step_losses)
    model.eval()
    return {name: sum(losses) / len(losses) for name, losses in tail.items() if losses}


def _assistant_loss(model, batch: dict):
    """The mean cross-entropy of the labelled (assistant) tokens, as ``model(**batch).loss`` computes it, but cheaper:
    no attention mask (the batch is right-padded and attention is causal, so no real token sees a pad) and output
    logits only where there is a label."""
    import torch.nn.functional as F

    hidden = model.base_model(input_ids=batch["input_ids"]).last_hidden_state
    labels = batch["labels"][:, 1:]
    labelled = labels != -100
    logits = model.get_output_embeddings()(hidden[:, :-1][labelled])
    return F.cross_entropy(logits, labels[labelled])


def _encode(tokenizer, messages: list[Message], skip_tokens: int = 0) -> tuple[list[int], list[int]]:
    """Token ids and the loss mask of a conversation: 1 on assistant tokens (``<|im_end|>`` included) except the
    first ``skip_tokens`` of the first assistant message."""
    encoding = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = list(encoding["input_ids"]), list(encoding["assistant_masks"])
    if not any(mask):
        raise ValueError(f"warm_start: the chat template marked no assistant token in {messages!r}")
    first = mask.index(1)
    if skip_tokens:
        if not all(mask[first : first + skip_tokens + 1]):
            raise ValueError(
                f"warm_start: skipping {skip_tokens} token(s) leaves no loss on the first assistant "
                f"message of {messages!r}"
            )
        mask[first : first + skip_tokens] = [0] * skip_tokens
    return ids, mask


def _batch(rows: list[tuple[list[int], list[int]]], pad_token_id: int) -> dict:
    """Right-padded ``input_ids`` / ``attention_mask`` / ``labels`` (-100 outside the assistant tokens)."""
    import torch

    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, (ids, mask) in enumerate(rows):
        input_ids[r, : len(ids)] = torch.tensor(ids)
        attention_mask[r, : len(ids)] = 1
        labels[r, : len(ids)] = torch.tensor([i if m else -100 for i, m in zip(ids, mask)])
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
