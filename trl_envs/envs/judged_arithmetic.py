"""``judged_arithmetic``: the example env for pairwise-judge group rewards (:mod:`trl_envs.core.judge`).

The model answers ``What is a + b?``; the env itself gives no reward. A rule-based judge compares the answers of a
group two by two: the answer closer to the true sum wins, a number beats a non-number, equally close answers tie.
Each answer's reward is its mean of wins minus losses against the rest of the group.

Why this example: it needs no second model, the tiny model's answers vary (it is right about a quarter of the time
and near misses are common), and the judge ranks answers by degree — 7 for 3 + 5 beats 2 — which a pointwise
right/wrong reward cannot. Swap :class:`CloserToJudge` for :class:`~trl_envs.rollout.model_judge.ModelJudge` (or any
function of two answers) to train against a model's preferences instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..core.builtin_datasets import BuiltinDataset
from ..core.judge import PairwiseJudgeGroupBuilder
from ..core.message_env import MessageEnv, MessageStepResult, MessageTokenEnv
from ..core.renderer import Message, ParsedResponse, Renderer
from ..core.types import Env, EnvGroupBuilder
from .arithmetic import ArithmeticDatasetBuilder, batch_problems, distinct_problems, question, read_answer


class CloserToJudge:
    """Judge: the answer closer to ``target`` wins; an answer beats a non-answer; else a tie. Answers are read by
    :func:`~trl_envs.envs.arithmetic.read_answer` (a bare integer or a worked sum)."""

    def __init__(self, target: int):
        self.target = target

    def __call__(self, a: str, b: str) -> float:
        da, db = read_answer(a), read_answer(b)
        if da is None or db is None:
            return float(da is not None) - float(db is not None)
        ea, eb = abs(da - self.target), abs(db - self.target)
        return 1.0 if ea < eb else -1.0 if ea > eb else 0.0


class QuestionEnv(MessageEnv):
    """One question, one answer, no reward from the env (the group's judge gives it). Logs ``correct``."""

    def __init__(self, text: str, answer: int):
        self.text, self.answer = text, answer

    async def initial_messages(self) -> list[Message]:
        return [{"role": "user", "content": self.text}]

    async def step(self, response: ParsedResponse) -> MessageStepResult:
        value = read_answer(response.message["content"]) if response.ok else None
        return MessageStepResult(
            0.0, True, [], {"correct": float(value == self.answer), "parse_ok": float(value is not None)}
        )


class QuestionGroupBuilder(EnvGroupBuilder):
    """``group_size`` copies of one :class:`QuestionEnv`."""

    def __init__(self, renderer: Renderer, a: int, b: int, group_size: int):
        self.renderer, self.a, self.b, self.group_size = renderer, a, b, group_size

    async def make_envs(self) -> Sequence[Env]:
        return [
            MessageTokenEnv(QuestionEnv(question(self.a, self.b), self.a + self.b), self.renderer)
            for _ in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return ["judged_arithmetic"]


class JudgedArithmeticDataset(BuiltinDataset):
    """``num_batches`` batches of ``batch_size`` judged groups; batch ``i`` is fixed by ``seed`` and ``i``. With
    ``distinct`` (a test split) no problem repeats, as in :class:`~trl_envs.envs.arithmetic.ArithmeticDataset`."""

    draw_prefix: ClassVar[str] = "judged_arithmetic"

    def __init__(
        self,
        renderer: Renderer,
        batch_size: int,
        group_size: int,
        num_batches: int,
        max_operand: int = 9,
        seed: int = 0,
        both_orders: bool = False,
        problems: Sequence[tuple[int, int]] | None = None,
        *,
        distinct: bool = False,
    ):
        if group_size < 2:
            raise ValueError(f"judged_arithmetic: group_size must be >= 2 to compare answers, got {group_size}")
        self.order = distinct_problems(problems, max_operand, seed, num_batches * batch_size) if distinct else None
        if self.order is not None:
            num_batches = -(-len(self.order) // batch_size)
        super().__init__(renderer, batch_size, group_size, num_batches)
        self.max_operand, self.seed, self.both_orders = max_operand, seed, both_orders
        self.problems = list(problems) if problems is not None else None

    def make_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        out = []
        for a, b in batch_problems(self, index):
            out.append(
                PairwiseJudgeGroupBuilder(
                    QuestionGroupBuilder(self.renderer, a, b, self.group_size),
                    CloserToJudge(a + b),
                    self.renderer,
                    both_orders=self.both_orders,
                )
            )
        return out


@dataclass
class JudgedArithmeticDatasetBuilder(ArithmeticDatasetBuilder):
    """Single turn: `What is a + b?`, rewarded by a pairwise judge (the answer closer to a + b wins).

    Train and test :class:`JudgedArithmeticDataset` s (the test set uses another seed); ``held_out_fraction``
    holds questions out of training as in :class:`~trl_envs.envs.arithmetic.ArithmeticDatasetBuilder`.
    """

    from_row: ClassVar = None  # no row spec: a judged group is not a row of fields
    env_name: ClassVar[str] = "judged_arithmetic"
    int_options: ClassVar[dict[str, int]] = {"group_size": 2, "max_operand": 0}  # a judge compares >= 2 answers

    dataset_class: ClassVar[type] = JudgedArithmeticDataset
