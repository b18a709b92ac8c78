"""``tool_use``: multi-turn tool use. The model may call a calculator through the chat template's tool-call format
(see :mod:`trl_envs.core.tools`); the env runs each call and answers with tool messages; the episode ends on a reply
without a tool call, which is read as the final answer.

Reward: 1 for the right final answer (a bare number), 0 otherwise. Malformed tool calls are answered with an
``Error:`` tool message (counted in ``tool_errors``), never a crash; after ``max_tool_calls`` calls the tool answers
that the budget is used up and asks for the final answer.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..core.builtin_datasets import BuiltinDataset, BuiltinDatasetBuilder
from ..core.message_env import MessageEnv, MessageStepResult, MessageTokenEnv
from ..core.renderer import Message, ParsedResponse, Renderer
from ..core.tools import (
    CALCULATOR,
    Tool,
    ToolCall,
    parse_tool_calls,
    renderer_with_tools,
    run_tool_call,
    tools_system_prompt,
)
from ..core.types import Env, EnvGroupBuilder

_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*\.?\s*$")


def read_number(text: str) -> float | None:
    m = _NUMBER.match(text)
    return float(m.group(1)) if m else None


class ToolUseEnv(MessageEnv):
    """Answer ``question`` (whose answer is ``answer``) with the help of ``tools``.

    Args:
        question: the user's question.
        answer: the right final answer.
        tools: the tools the model may call.
        system_prompt: a system message (e.g. :func:`~trl_envs.core.tools.tools_system_prompt` for templates that do not
            render tool definitions themselves); ``None``: none.
        max_tool_calls: calls allowed per episode; later calls get an ``Error:`` message asking for the answer.
    """

    def __init__(
        self,
        question: str,
        answer: float,
        tools: Sequence[Tool],
        system_prompt: str | None = None,
        max_tool_calls: int = 4,
    ):
        self.question, self.answer = question, answer
        self.tools = {t.name: t for t in tools}
        self.system_prompt, self.max_tool_calls = system_prompt, max_tool_calls
        self.tool_calls = self.tool_errors = 0

    async def initial_messages(self) -> list[Message]:
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [{"role": "user", "content": self.question}]

    async def step(self, response: ParsedResponse) -> MessageStepResult:
        text = response.message["content"]
        calls = parse_tool_calls(text)
        if not calls:  # the final answer
            value = read_number(text) if response.ok else None
            correct = value is not None and abs(value - self.answer) < 1e-6
            return MessageStepResult(float(correct), True, [], self._answer_metrics(correct, value is not None))
        replies, all_ok = [], True
        for call in calls:
            self.tool_calls += 1
            if self.tool_calls > self.max_tool_calls:  # answered like any unusable call: an Error: tool message
                call = ToolCall(
                    call.name, error=f"no tool calls left (at most {self.max_tool_calls}); give your final answer"
                )
            reply, ok = run_tool_call(call, self.tools)
            self.tool_errors += not ok
            all_ok = all_ok and ok
            replies.append(reply)
        return MessageStepResult(0.0, False, replies, {"tool_call_ok": float(all_ok)})

    def _answer_metrics(self, correct: bool, answered: bool) -> dict[str, float]:
        return {
            "correct": float(correct),
            "answer_format": float(answered),
            "tool_calls": float(self.tool_calls),
            "tool_errors": float(self.tool_errors),
            "used_tool": float(self.tool_calls > 0),
        }


def make_problem(rng: random.Random, max_operand: int) -> tuple[str, int]:
    """``What is a * b + c?`` with operands up to ``max_operand``: easy with a calculator, hard by heart."""
    a, b, c = (rng.randint(2, max_operand) for _ in range(3))
    return f"What is {a} * {b} + {c}?", a * b + c


class ToolUseGroupBuilder(EnvGroupBuilder):
    """``group_size`` copies of one :class:`ToolUseEnv` problem."""

    def __init__(
        self,
        renderer: Renderer,
        question: str,
        answer: int,
        group_size: int,
        system_prompt: str | None,
        max_tool_calls: int = 4,
        tools: Sequence[Tool] = (CALCULATOR,),
    ):
        self.renderer, self.question, self.answer, self.group_size = renderer, question, answer, group_size
        self.system_prompt, self.max_tool_calls, self.tools = system_prompt, max_tool_calls, list(tools)

    async def make_envs(self) -> Sequence[Env]:
        return [
            MessageTokenEnv(
                ToolUseEnv(self.question, self.answer, self.tools, self.system_prompt, self.max_tool_calls),
                self.renderer,
            )
            for _ in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return ["tool_use"]


class ToolUseDataset(BuiltinDataset):
    """``num_batches`` batches of ``batch_size`` groups; batch ``i`` is fixed by ``seed`` and ``i``.

    Tool definitions reach the model through the template when it renders ``tools`` (the renderer is then a copy
    of ``renderer`` with ``tools`` in its ``chat_template_kwargs``), else through a system message in the same
    ``<tool_call>`` format.
    """

    def __init__(
        self,
        renderer: Renderer,
        batch_size: int,
        group_size: int,
        num_batches: int,
        max_operand: int = 30,
        max_tool_calls: int = 4,
        seed: int = 0,
        tools: Sequence[Tool] = (CALCULATOR,),
    ):
        self.max_operand, self.max_tool_calls, self.seed, self.tools = max_operand, max_tool_calls, seed, list(tools)
        tool_renderer = renderer_with_tools(renderer, self.tools)
        super().__init__(tool_renderer or renderer, batch_size, group_size, num_batches)
        self.system_prompt = None if tool_renderer is not None else tools_system_prompt(self.tools)

    def make_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        rng = random.Random(f"tool_use/{self.seed}/{index}")
        out = []
        for _ in range(self.batch_size):
            question, answer = make_problem(rng, self.max_operand)
            out.append(
                ToolUseGroupBuilder(
                    self.renderer,
                    question,
                    answer,
                    self.group_size,
                    self.system_prompt,
                    self.max_tool_calls,
                    self.tools,
                )
            )
        return out


@dataclass
class ToolUseDatasetBuilder(BuiltinDatasetBuilder):
    """Multi-turn tool use: call a calculator through the chat template's tool calls, then answer.

    Train and test :class:`ToolUseDataset` s (the test set uses another seed).
    """

    env_name: ClassVar[str] = "tool_use"
    int_options: ClassVar[dict[str, int]] = {"max_operand": 2, "max_tool_calls": 0}  # operands are drawn from 2..max

    max_operand: int = 30
    max_tool_calls: int = 4

    def dataset(self, num_batches: int, seed: int) -> ToolUseDataset:
        return ToolUseDataset(
            self.renderer, self.batch_size, self.group_size, num_batches, self.max_operand, self.max_tool_calls, seed
        )
