"""``guess_number``: multi-turn. The model guesses a hidden number; the env answers "Higher." or "Lower."."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.builtin_datasets import BuiltinDataset, BuiltinDatasetBuilder, check_int_option
from ..core.message_env import MessageEnv, MessageStepResult, MessageTokenEnv
from ..core.renderer import Message, ParsedResponse, Renderer
from ..core.types import Env, EnvGroupBuilder

_INTEGER = re.compile(r"^-?\d+$")


def intro(low: int, high: int) -> str:
    return f"Guess my number between {low} and {high}."


class GuessNumberEnv(MessageEnv):
    """One game. Rewards: ``wrong_penalty`` (negative) per wrong or unparsable guess, ``win_reward`` for the right
    one. The episode ends on the right guess or after ``max_guesses`` guesses."""

    def __init__(
        self,
        target: int,
        low: int = 1,
        high: int = 16,
        max_guesses: int = 6,
        win_reward: float = 1.0,
        wrong_penalty: float = -0.1,
    ):
        if not low <= target <= high:
            raise ValueError(f"GuessNumberEnv: target {target} outside [{low}, {high}]")
        self.target, self.low, self.high, self.max_guesses = target, low, high, max_guesses
        self.win_reward, self.wrong_penalty = win_reward, wrong_penalty
        self.guesses = 0

    async def initial_messages(self) -> list[Message]:
        return [{"role": "user", "content": intro(self.low, self.high)}]

    async def step(self, response: ParsedResponse) -> MessageStepResult:
        self.guesses += 1
        text = response.message["content"].strip()
        parsed = int(text) if _INTEGER.match(text) and response.ok else None
        out_of_guesses = self.guesses >= self.max_guesses
        metrics = {"parse_ok": float(parsed is not None)}
        if parsed == self.target:
            metrics |= {"win": 1.0, "guesses": float(self.guesses)}
            return MessageStepResult(self.win_reward, True, [], metrics)
        if out_of_guesses:
            metrics |= {"win": 0.0, "guesses": float(self.guesses)}
            return MessageStepResult(self.wrong_penalty, True, [], metrics)
        reply = reply_for(parsed, self.target, self.low, self.high)
        return MessageStepResult(self.wrong_penalty, False, [{"role": "user", "content": reply}], metrics)


def reply_for(guess: int | None, target: int, low: int, high: int) -> str:
    if guess is None:
        return f"Reply with just a number between {low} and {high}."
    return "Higher." if guess < target else "Lower."


class GuessNumberGroupBuilder(EnvGroupBuilder):
    """``group_size`` games with the same hidden number. Also the env's row spec:
    ``{"env": "guess_number", "target": 7, "low": 1, "high": 16, "max_guesses": 6}`` (all but ``target`` optional),
    see :meth:`from_row` / :meth:`to_row` and docs/envs_as_datasets.md."""

    def __init__(
        self, renderer: Renderer, target: int, group_size: int, low: int = 1, high: int = 16, max_guesses: int = 6
    ):
        self.renderer, self.target, self.group_size = renderer, target, group_size
        self.low, self.high, self.max_guesses = low, high, max_guesses

    async def make_envs(self) -> Sequence[Env]:
        return [
            MessageTokenEnv(GuessNumberEnv(self.target, self.low, self.high, self.max_guesses), self.renderer)
            for _ in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return ["guess_number"]

    @classmethod
    def from_row(
        cls, renderer: Renderer, group_size: int, *, target: int, low: int = 1, high: int = 16, max_guesses: int = 6
    ) -> GuessNumberGroupBuilder:
        """The group of one row spec (the fields of ``{"env": "guess_number", "target": 7, ...}``)."""
        if not low <= target <= high:
            raise ValueError(f"target {target} is outside [low, high] = [{low}, {high}]")
        if max_guesses < 1:
            raise ValueError(f"max_guesses must be >= 1, got {max_guesses}")
        return cls(renderer, target, group_size, low, high, max_guesses)

    def to_row(self) -> dict[str, Any]:
        """This group's row spec, JSON-serializable (the inverse of :meth:`from_row`)."""
        return {
            "env": "guess_number",
            "target": self.target,
            "low": self.low,
            "high": self.high,
            "max_guesses": self.max_guesses,
        }


class GuessNumberDataset(BuiltinDataset):
    """``num_batches`` batches of ``batch_size`` groups; batch ``i`` is fixed by ``seed`` and ``i``."""

    def __init__(
        self,
        renderer: Renderer,
        batch_size: int,
        group_size: int,
        num_batches: int,
        low: int = 1,
        high: int = 16,
        max_guesses: int = 6,
        seed: int = 0,
    ):
        if low > high:  # else get_batch fails with random's "empty range"
            raise ValueError(f"guess_number: low must be <= high, got low={low}, high={high}")
        super().__init__(renderer, batch_size, group_size, num_batches)
        self.low, self.high, self.max_guesses, self.seed = low, high, max_guesses, seed

    def make_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        rng = random.Random(f"guess_number/{self.seed}/{index}")
        return [
            GuessNumberGroupBuilder(
                self.renderer, rng.randint(self.low, self.high), self.group_size, self.low, self.high, self.max_guesses
            )
            for _ in range(self.batch_size)
        ]


@dataclass
class GuessNumberDatasetBuilder(BuiltinDatasetBuilder):
    """Multi-turn: guess a hidden number; the env answers `Higher.` / `Lower.`.

    Train and test :class:`GuessNumberDataset` s (the test set uses another seed). ``from_row`` gives the env its row
    spec (see :mod:`trl_envs.registry.names`).
    """

    from_row: ClassVar = GuessNumberGroupBuilder.from_row
    env_name: ClassVar[str] = "guess_number"
    int_options: ClassVar[dict[str, int]] = {"max_guesses": 1}

    low: int = 1
    high: int = 16
    max_guesses: int = 6

    def check_options(self) -> None:
        super().check_options()
        check_int_option(self.env_name, "low", self.low)
        check_int_option(self.env_name, "high", self.high)
        if self.low > self.high:
            raise ValueError(
                f"env 'guess_number': option 'low' must be <= option 'high', got low={self.low}, high={self.high}"
            )

    def dataset(self, num_batches: int, seed: int) -> GuessNumberDataset:
        return GuessNumberDataset(
            self.renderer, self.batch_size, self.group_size, num_batches, self.low, self.high, self.max_guesses, seed
        )


def demonstrations(num: int, seed: int = 0, low: int = 1, high: int = 16) -> list[list[Message]]:
    """Played games for warm-starting: each guess is drawn uniformly from the interval still possible, so the
    demonstrator is consistent with the hints but far from optimal (RL has room to improve it)."""
    rng = random.Random(f"guess-number-demos/{seed}")
    return [played_game(rng.randint(low, high), rng.randint, low, high) for _ in range(num)]


def played_game(target: int, choose: Callable[[int, int], int], low: int = 1, high: int = 16) -> list[Message]:
    """The conversation of one game won by a guesser that is consistent with the hints: ``choose(lo, hi)`` picks each
    guess among the numbers still possible, ``lo..hi``."""
    lo, hi = low, high
    convo: list[Message] = [{"role": "user", "content": intro(low, high)}]
    while True:
        guess = choose(lo, hi)
        convo.append({"role": "assistant", "content": str(guess)})
        if guess == target:
            return convo
        convo.append({"role": "user", "content": reply_for(guess, target, low, high)})
        lo, hi = (guess + 1, hi) if guess < target else (lo, guess - 1)
