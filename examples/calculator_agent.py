"""A calculator agent written as agents are written anywhere: a loop over the ``openai`` client with one tool.
trl_envs trains it as it is, serving the policy behind an OpenAI-compatible endpoint during rollouts.

Train it (from the repository root; needs ``pip install "trl-envs[agents]" openai``):

    PYTHONPATH=. python scripts/train_grpo.py --env examples.calculator_agent:make_dataset \\
        --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --output_dir outputs/calculator-agent

Run it against any OpenAI-compatible server (vLLM, the OpenAI API) to see what it does:

    python examples/calculator_agent.py --base_url http://localhost:8000/v1 --api_key EMPTY --model my-model
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re

import httpx
import openai

from trl_envs.core.tools import evaluate_expression, format_number

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression: numbers, + - * / // % ** and parentheses.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}


def calculate(expression: str) -> str:
    """The tool: the value of an arithmetic expression, or an ``Error:`` the model can read."""
    try:
        return format_number(evaluate_expression(expression))
    except (ValueError, ArithmeticError) as e:
        return f"Error: {e}"


async def agent(base_url: str, api_key: str, task: dict, model: str = "policy") -> float:
    """Answer ``task["question"]``, calling the calculator as the model asks; 1.0 for the right final number."""
    # Plain HTTP on localhost: a client without a TLS context starts ~40 ms faster than the default one.
    async with openai.AsyncOpenAI(
        base_url=base_url, api_key=api_key, max_retries=0, http_client=httpx.AsyncClient(verify=False, timeout=600)
    ) as client:
        messages = [{"role": "user", "content": task["question"]}]
        for _ in range(4):
            response = await client.chat.completions.create(
                model=model, messages=messages, tools=[CALCULATOR], max_tokens=64
            )
            message = response.choices[0].message
            if not message.tool_calls:
                answer = re.fullmatch(r"\s*(-?\d+)\s*\.?\s*", message.content or "")
                return float(answer is not None and int(answer.group(1)) == task["answer"])
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                try:
                    result = calculate(json.loads(call.function.arguments).get("expression", ""))
                except (json.JSONDecodeError, AttributeError):
                    result = "Error: arguments must be a JSON object with an expression"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return 0.0


def tasks(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b, c = rng.randint(2, 30), rng.randint(2, 30), rng.randint(2, 30)
        out.append({"question": f"What is {a} * {b} + {c}?", "answer": a * b + c})
    return out


def make_dataset(renderer, group_size: int = 4, batch_size: int = 4, num_batches: int = 100, seed: int = 0):
    """What ``scripts/train_grpo.py --env examples.calculator_agent:make_dataset`` calls."""
    from trl_envs.agents import AgentDatasetBuilder

    return AgentDatasetBuilder(
        agent,
        tasks(num_batches * batch_size, seed),
        renderer,
        test_tasks=tasks(64, seed + 10_000),
        batch_size=batch_size,
        group_size=group_size,
        num_batches=num_batches,
        tags=["calculator"],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base_url", required=True)
    parser.add_argument("--api_key", default="EMPTY")
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    task = tasks(1, 0)[0]
    print(task["question"], "->", asyncio.run(agent(args.base_url, args.api_key, task, args.model)))
