"""``arithmetic``: single-turn sums of small numbers, answered with the exact number.

The response must end with the answer: a bare integer (``7``), or any text ending with it (the worked sum
``Let's add: 3 + 4 = 7``); the number that counts is the last one, as in the Tinker cookbook's arithmetic env.
Working the sum out (:func:`worked_sum`) is how the demo model gets it right reliably (its warm start taught it both
ways, :mod:`trl_envs.tiny_model`): what GRPO learns on this env is to work it out every time.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from ..core.builtin_datasets import BuiltinDataset, BuiltinDatasetBuilder
from ..core.problem_env import ProblemEnv, ProblemGroupBuilder
from ..core.renderer import Message, Renderer
from ..core.types import TEST_SEED_OFFSET, EnvGroupBuilder

_FINAL_INTEGER = re.compile(r"(?<![\w.])(-?\d+)\s*$")


def read_answer(text: str) -> int | None:
    """The integer ``text`` ends with (trailing whitespace ignored), else ``None`` (the response is malformed):
    ``"7"`` and ``"Let's add: 3 + 4 = 7"`` answer 7; ``"The answer is 7."`` and ``"x7"`` answer nothing."""
    m = _FINAL_INTEGER.search(text)
    return int(m.group(1)) if m else None


class ArithmeticEnv(ProblemEnv):
    """``What is a + b?`` — right when the response's answer is the sum (format: :func:`read_answer`)."""

    def __init__(self, renderer: Renderer, a: int, b: int, format_coef: float = 0.1):
        super().__init__(renderer, format_coef=format_coef)
        self.a, self.b = a, b

    def get_question(self) -> str:
        return question(self.a, self.b)

    def check_format(self, sample_str: str) -> bool:
        return read_answer(sample_str) is not None

    def check_answer(self, sample_str: str) -> bool:
        return read_answer(sample_str) == self.a + self.b

    def get_reference_answer(self) -> str:
        return str(self.a + self.b)


def question(a: int, b: int) -> str:
    return f"What is {a} + {b}?"


def worked_sum(a: int, b: int) -> str:
    """The worked answer to ``What is a + b?``: ``Let's add: 3 + 4 = 7``. It begins with words, not a digit, so a
    model's choice between working the sum out and answering quickly is its first token."""
    return f"Let's add: {a} + {b} = {a + b}"


def sample_problem(rng: random.Random, max_operand: int) -> tuple[int, int]:
    return rng.randint(0, max_operand), rng.randint(0, max_operand)


def draw_problem(rng: random.Random, problems: Sequence[tuple[int, int]] | None, max_operand: int) -> tuple[int, int]:
    """One of ``problems`` when given (a held-out split's side), else any pair of operands ``0..max_operand``."""
    return rng.choice(problems) if problems else sample_problem(rng, max_operand)


def distinct_problems(
    problems: Sequence[tuple[int, int]] | None, max_operand: int, seed: int, limit: int
) -> list[tuple[int, int]]:
    """At most ``limit`` problems, each once, in an order fixed by ``seed``: of ``problems`` when given (a held-out
    split's side), else of every pair of operands ``0..max_operand``. What a test split plays, so that no problem is
    counted twice in an evaluation."""
    pool = (
        sorted(set(problems)) if problems else [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    )
    random.Random(f"arithmetic-test/{seed}").shuffle(pool)
    return pool[:limit]


def batch_problems(dataset: Any, index: int) -> list[tuple[int, int]]:
    """The ``(a, b)`` of batch ``index`` of an arithmetic-style dataset (``batch_size``, ``seed``, ``problems``,
    ``max_operand``, ``order``): a slice of ``order`` when the dataset plays distinct problems, else drawn with the
    batch's own seed."""
    if dataset.order is not None:
        return dataset.order[index * dataset.batch_size : (index + 1) * dataset.batch_size]
    rng = random.Random(f"{dataset.draw_prefix}/{dataset.seed}/{index}")
    return [draw_problem(rng, dataset.problems, dataset.max_operand) for _ in range(dataset.batch_size)]


def split_problems(max_operand: int, held_out_fraction: float) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(train, held_out)``: every pair ``(a, b)`` with operands ``0..max_operand``, a fixed (seed-independent)
    ``held_out_fraction`` of them set aside for testing. The same split for every training seed, so a test set made
    of ``held_out`` problems never shares a question with training."""
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"arithmetic: held_out_fraction must be in (0, 1), got {held_out_fraction!r}")
    pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    random.Random(f"arithmetic-split/{max_operand}").shuffle(pairs)
    num_held_out = max(1, min(len(pairs) - 1, round(held_out_fraction * len(pairs))))
    return sorted(pairs[num_held_out:]), sorted(pairs[:num_held_out])


class ArithmeticGroupBuilder(ProblemGroupBuilder):
    """``group_size`` copies of ``What is a + b?``. Also the env's row spec: ``{"env": "arithmetic", "a": 2, "b": 3}``
    (optional ``format_coef``), see :meth:`from_row` / :meth:`to_row` and docs/envs_as_datasets.md."""

    def __init__(self, renderer: Renderer, a: int, b: int, group_size: int, format_coef: float = 0.1):
        super().__init__(partial(ArithmeticEnv, renderer, a, b, format_coef), group_size, dataset_name="arithmetic")
        self.a, self.b, self.format_coef = a, b, format_coef

    @classmethod
    def from_row(
        cls, renderer: Renderer, group_size: int, *, a: int, b: int, format_coef: float = 0.1
    ) -> ArithmeticGroupBuilder:
        """The group of one row spec (the fields of ``{"env": "arithmetic", "a": 2, "b": 3}``)."""
        return cls(renderer, a, b, group_size, format_coef)

    def to_row(self) -> dict[str, Any]:
        """This group's row spec, JSON-serializable (the inverse of :meth:`from_row`)."""
        return {"env": "arithmetic", "a": self.a, "b": self.b, "format_coef": self.format_coef}


class ArithmeticDataset(BuiltinDataset):
    """``num_batches`` batches of ``batch_size`` groups; batch ``i`` is fixed by ``seed`` and ``i``. Problems are
    drawn uniformly from ``problems`` when given, else from all operands ``0..max_operand``. With ``distinct`` (a
    test split) no problem repeats: the batches hold :func:`distinct_problems` in order, the last one shorter when
    the problems run out before ``num_batches`` full batches."""

    draw_prefix: ClassVar[str] = "arithmetic"

    def __init__(
        self,
        renderer: Renderer,
        batch_size: int,
        group_size: int,
        num_batches: int,
        max_operand: int = 9,
        seed: int = 0,
        format_coef: float = 0.1,
        problems: Sequence[tuple[int, int]] | None = None,
        *,
        distinct: bool = False,
    ):
        self.order = distinct_problems(problems, max_operand, seed, num_batches * batch_size) if distinct else None
        if self.order is not None:
            num_batches = -(-len(self.order) // batch_size)
        super().__init__(renderer, batch_size, group_size, num_batches)
        self.max_operand, self.seed, self.format_coef = max_operand, seed, format_coef
        self.problems = list(problems) if problems is not None else None

    def make_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [
            ArithmeticGroupBuilder(self.renderer, a, b, self.group_size, self.format_coef)
            for a, b in batch_problems(self, index)
        ]


@dataclass
class ArithmeticDatasetBuilder(BuiltinDatasetBuilder):
    """Single turn: `What is a + b?`, answered with a bare integer.

    Train and test :class:`ArithmeticDataset` s (the test set uses another seed). With ``held_out_fraction`` > 0
    that fraction of the questions (:func:`split_problems`) is only ever in the test set and the rest only in the
    training set: the test set measures questions the model never trained on. ``from_row`` gives the env its row
    spec (see :mod:`trl_envs.registry.names`).
    """

    from_row: ClassVar = ArithmeticGroupBuilder.from_row
    env_name: ClassVar[str] = "arithmetic"
    dataset_class: ClassVar[type] = ArithmeticDataset  # the RLDataset of the splits
    int_options: ClassVar[dict[str, int]] = {"max_operand": 0}

    max_operand: int = 9
    held_out_fraction: float = 0.0

    def check_options(self) -> None:
        super().check_options()
        fraction = self.held_out_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction < 1.0:
            raise ValueError(f"arithmetic: option held_out_fraction must be a number in [0, 1), got {fraction!r}")

    def dataset(
        self,
        num_batches: int,
        seed: int,
        problems: Sequence[tuple[int, int]] | None = None,
        *,
        distinct: bool = False,
    ) -> ArithmeticDataset:
        return self.dataset_class(
            self.renderer,
            self.batch_size,
            self.group_size,
            num_batches,
            self.max_operand,
            seed,
            problems=problems,
            distinct=distinct,
        )

    def test_dataset(self) -> ArithmeticDataset:
        """``num_test_batches`` batches of distinct problems (fewer when the held-out problems run out)."""
        split = self.held_out_split()
        problems = None if split is None else split[1]
        return self.dataset(self.num_test_batches, self.test_seed + TEST_SEED_OFFSET, problems, distinct=True)

    def held_out_split(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]] | None:
        return split_problems(self.max_operand, self.held_out_fraction) if self.held_out_fraction else None


def demonstrations(num: int, seed: int = 0, max_operand: int = 9) -> list[list[Message]]:
    """Solved conversations, for warm-starting a model with supervised fine-tuning."""
    rng = random.Random(f"arithmetic-demos/{seed}")
    out = []
    for _ in range(num):
        a, b = sample_problem(rng, max_operand)
        out.append([{"role": "user", "content": question(a, b)}, {"role": "assistant", "content": str(a + b)}])
    return out
