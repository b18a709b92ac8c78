"""``calculator_agent``: an agent program written with the ``openai`` client — it owns its loop, offers the model a
calculator tool, runs the tool calls it gets back and reads the final answer — trained as it is through the agent
endpoint (:mod:`trl_envs.agents`, docs/agents.md). The same task as ``tool_use``, written the way agents are
written outside this library.

Reward: 1 for the right final answer (a bare number), 0 otherwise. Metrics: ``correct``, ``answer_format``,
``used_tool``, ``tool_calls``, ``tool_errors`` (plus the endpoint's ``agent_calls``, ``history_rewrites``).
Needs ``pip install "trl-envs[agents]" openai``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, ClassVar

from ..agents import AgentDataset
from ..core.builtin_datasets import BuiltinDatasetBuilder, check_int_option
from ..core.tools import CALCULATOR, ToolCall, run_tool_call
from ..core.types import TEST_SEED_OFFSET
from .arithmetic import split_problems
from .tool_use import make_problem, read_number

PROBLEMS = ("mul_add", "add")


async def calculator_agent(base_url: str, api_key: str, task: dict[str, Any]) -> dict[str, Any]:
    """Answer ``task["question"]`` with the help of a calculator; ``{"reward", "metrics"}``."""
    import httpx
    import openai

    max_tool_calls = task.get("max_tool_calls", 4)
    messages: list[Any] = [{"role": "user", "content": task["question"]}]
    tool_calls = tool_errors = 0
    # The endpoint is plain HTTP on 127.0.0.1: no TLS, so no CA bundle to load, and no proxy (trust_env=False: no
    # proxy settings read per client, and none applied to 127.0.0.1).
    http_client = httpx.AsyncClient(verify=False, trust_env=False, timeout=600)
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http_client) as client:
        while True:
            response = await client.chat.completions.create(
                model="policy", messages=messages, tools=[CALCULATOR.schema()]
            )
            choice = response.choices[0]
            message = choice.message
            if not message.tool_calls:
                value = read_number(message.content or "") if choice.finish_reason == "stop" else None
                correct = value is not None and abs(value - task["answer"]) < 1e-6
                return {
                    "reward": float(correct),
                    "metrics": {
                        "correct": float(correct),
                        "answer_format": float(value is not None),
                        "used_tool": float(tool_calls > 0),
                        "tool_calls": float(tool_calls),
                        "tool_errors": float(tool_errors),
                    },
                }
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                tool_calls += 1
                try:
                    arguments = json.loads(call.function.arguments)
                except json.JSONDecodeError:
                    arguments = {}
                parsed = ToolCall(call.function.name, arguments if isinstance(arguments, dict) else {})
                if tool_calls > max_tool_calls:
                    parsed.error = f"no tool calls left (at most {max_tool_calls}); give your final answer"
                reply, ok = run_tool_call(parsed, {CALCULATOR.name: CALCULATOR})
                tool_errors += not ok
                messages.append({"role": "tool", "tool_call_id": call.id, "content": reply["content"]})


def make_tasks(
    num_batches: int,
    batch_size: int,
    seed: int,
    problem: str,
    max_operand: int,
    max_tool_calls: int,
    pairs: list[tuple[int, int]] | None = None,
) -> list[dict[str, Any]]:
    """``num_batches * batch_size`` tasks: ``What is a * b + c?`` (``mul_add``, operands 2..max; for a given seed
    the same questions, batch by batch, as the ``tool_use`` env) or ``What is a + b?`` (``add``, operands 0..max, or
    drawn from ``pairs`` when given)."""
    tasks = []
    for index in range(num_batches):
        rng = random.Random(f"tool_use/{seed}/{index}" if problem == "mul_add" else f"calculator_agent/{seed}/{index}")
        for _ in range(batch_size):
            if problem == "mul_add":
                question, answer = make_problem(rng, max_operand)
            else:
                a, b = rng.choice(pairs) if pairs else (rng.randint(0, max_operand), rng.randint(0, max_operand))
                question, answer = f"What is {a} + {b}?", a + b
            tasks.append({"question": question, "answer": answer, "max_tool_calls": max_tool_calls})
    return tasks


@dataclass
class CalculatorAgentDatasetBuilder(BuiltinDatasetBuilder):
    """An openai-client agent with a calculator tool, trained through the agent endpoint (needs the agents extra).

    ``problem``: ``mul_add`` (``What is a * b + c?``, operands 2..``max_operand``) or ``add`` (``What is a + b?``,
    operands 0..``max_operand``). With ``problem: add`` and ``held_out_fraction`` > 0 that fraction of the sums (the
    ``arithmetic`` env's split, :func:`~trl_envs.envs.arithmetic.split_problems`) is only ever in the test set and
    the rest only in the training set.
    """

    env_name: ClassVar[str] = "calculator_agent"
    int_options: ClassVar[dict[str, int]] = {"max_operand": 2, "max_tool_calls": 0}

    max_operand: int = 30
    max_tool_calls: int = 4
    problem: str = "mul_add"
    held_out_fraction: float = 0.0

    def check_options(self) -> None:
        super().check_options()
        if self.problem not in PROBLEMS:
            raise ValueError(f"env {self.env_name!r}: option 'problem' must be one of {PROBLEMS}, got {self.problem!r}")
        check_int_option(self.env_name, "max_operand", self.max_operand, 2)
        fraction = self.held_out_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction < 1.0:
            raise ValueError(
                f"env {self.env_name!r}: option 'held_out_fraction' must be a number in [0, 1), got {fraction!r}"
            )
        if fraction and self.problem != "add":
            raise ValueError(
                f"env {self.env_name!r}: option 'held_out_fraction' needs problem 'add' (mul_add questions are drawn "
                f"from {(self.max_operand - 1) ** 3} triples and not split), got problem {self.problem!r}"
            )

    def dataset(self, num_batches: int, seed: int, pairs: list[tuple[int, int]] | None = None) -> AgentDataset:
        tasks = make_tasks(
            num_batches, self.batch_size, seed, self.problem, self.max_operand, self.max_tool_calls, pairs
        )
        return AgentDataset(
            calculator_agent,
            tasks,
            self.renderer,
            batch_size=self.batch_size,
            group_size=self.group_size,
            num_batches=num_batches,
            tags=["calculator_agent"],
        )

    def held_out_split(self) -> tuple[list[tuple[int, int]], list[tuple[int, int]]] | None:
        return split_problems(self.max_operand, self.held_out_fraction) if self.held_out_fraction else None

    def test_dataset(self) -> AgentDataset:
        """The drawn test tasks, each question once (a repeated draw is dropped, not played twice)."""
        split = self.held_out_split()
        tasks = make_tasks(
            self.num_test_batches,
            self.batch_size,
            self.test_seed + TEST_SEED_OFFSET,
            self.problem,
            self.max_operand,
            self.max_tool_calls,
            None if split is None else split[1],
        )
        unique = list({task["question"]: task for task in tasks}.values())
        return AgentDataset(
            calculator_agent,
            unique,
            self.renderer,
            batch_size=self.batch_size,
            group_size=self.group_size,
            num_batches=self.num_test_batches,
            tags=["calculator_agent"],
            distinct=True,
        )
