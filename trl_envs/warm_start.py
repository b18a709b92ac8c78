"""The warm start of the demo model ``tiny-chat-v2`` (see :mod:`trl_envs.tiny_model`): what it is shown and how.

RL can only sharpen what a model already sometimes does. So the warm start teaches each env's *format* and an
*approximate* skill, and leaves the exact skill to reinforcement learning:

* ``arithmetic``: a **sloppy teacher**. For every question ``What is a + b?`` (operands 0..9) the teacher answers
  the right sum with probability :data:`SLOPPY_OFFSETS` ``[0]`` (about a third) and otherwise a sum off by 1 or 2.
  Fitted to that, the model knows every sum (its most likely answer, i.e. its greedy answer, is right) but, sampled
  at temperature 1, it is right only about as often as the teacher: GRPO groups have reward variance on every
  question, and what RL has to learn, answering *exactly* the sum every time, is a skill it must earn from rewards.
* ``guess_number``: played games whose every guess is uniform over the numbers still possible (consistent with the
  hints, far from the halving strategy RL can find).

The examples are weighted (a question's answers with the teacher's probabilities) and trained with a plain PyTorch
loop: batches drawn by weight from a seeded generator, loss on the assistant tokens only. This is several times
faster than TRL's ``SFTTrainer`` on a model this small (whose steps are all overhead) and fully deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .core.renderer import Message
from .envs.arithmetic import question
from .envs.guess_number import demonstrations as guess_number_demonstrations

SLOPPY_OFFSETS: dict[int, float] = {0: 0.34, -1: 0.28, 1: 0.28, -2: 0.05, 2: 0.05}
"""Probability that the sloppy arithmetic teacher's answer is off by each offset (0: the right sum). The right sum is
the single most likely answer, so the fitted model's greedy answer is right."""


@dataclass(frozen=True)
class WeightedExample:
    """One conversation and its sampling weight within its source."""

    messages: list[Message]
    weight: float = 1.0


def sloppy_arithmetic_examples(max_operand: int = 9) -> list[WeightedExample]:
    """Every question with operands ``0..max_operand``, once per answer the sloppy teacher may give, weighted by the
    teacher's probability of giving it (negative answers are left out and their weight dropped)."""
    examples = []
    for a in range(max_operand + 1):
        for b in range(max_operand + 1):
            for offset, probability in SLOPPY_OFFSETS.items():
                if a + b + offset >= 0:
                    examples.append(WeightedExample(
                        [{"role": "user", "content": question(a, b)},
                         {"role": "assistant", "content": str(a + b + offset)}], probability))
    return examples


def guess_number_examples(num: int, seed: int) -> list[WeightedExample]:
    """``num`` games of the consistent-but-random guesser (:func:`trl_envs.envs.guess_number.demonstrations`)."""
    return [WeightedExample(game) for game in guess_number_demonstrations(num, seed)]


@dataclass(frozen=True)
class Source:
    """A set of examples and how many of them (drawn by weight, with replacement) go into every training step."""

    name: str
    examples: Sequence[WeightedExample]
    per_step: int


def train(model, tokenizer, sources: Sequence[Source], *, steps: int, learning_rate: float, warmup_steps: int,
          seed: int) -> dict[str, float]:
    """Supervised fine-tuning of ``model`` on ``sources``: AdamW, linear warmup then cosine decay, gradient norm
    clipped to 1; every step one batch per source (separate forward passes, so short examples are not padded to long
    ones). Returns each source's mean loss over the last 10% of steps."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    encoded = {source.name: [_encode(tokenizer, example.messages) for example in source.examples]
               for source in sources}
    weights = {source.name: torch.tensor([example.weight for example in source.examples], dtype=torch.float64)
               for source in sources}
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)

    def schedule(step: int) -> float:
        return min(1.0, (step + 1) / warmup_steps) * 0.5 * (1.0 + math.cos(math.pi * step / steps))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    tail = {source.name: [] for source in sources}
    model.train()
    for step in range(steps):
        for source in sources:
            rows = torch.multinomial(weights[source.name], source.per_step, replacement=True, generator=generator)
            loss = model(**_batch([encoded[source.name][i] for i in rows.tolist()], tokenizer.pad_token_id)).loss
            (loss * source.per_step / sum(s.per_step for s in sources)).backward()
            if step >= steps - max(1, steps // 10):
                tail[source.name].append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    return {name: sum(losses) / len(losses) for name, losses in tail.items()}


def _encode(tokenizer, messages: list[Message]) -> tuple[list[int], list[int]]:
    """Token ids and the assistant mask (1 on assistant tokens, ``<|im_end|>`` included) of a conversation."""
    encoding = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                             return_assistant_tokens_mask=True)
    ids, mask = list(encoding["input_ids"]), list(encoding["assistant_masks"])
    if not any(mask):
        raise ValueError(f"warm_start: the chat template marked no assistant token in {messages!r}")
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

