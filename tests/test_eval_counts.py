"""An evaluation plays every problem of its split exactly once, whatever the split's size against the batch size: a
split of 1, 2, 3, 5 or 7 problems cut into batches of 4 is 1, 2, 3, 5 or 7 distinct problems, and the counts
``evaluate()`` reports are those (the verifiers case is in tests/test_verifiers_env.py)."""

from __future__ import annotations

import re

import pytest

from trl_envs.registry import make_env_dataset
from trl_envs.rollout.evaluation import evaluate
from trl_envs.rollout.event_loop import run_sync
from trl_envs.samplers.text_policy import TextPolicySampler

SIZES = (1, 2, 3, 5, 7)


def last_question(prompt: str) -> str:
    return prompt.rsplit("<|im_start|>user", 1)[-1]


def solve_sum(prompt: str) -> str:
    a, b = re.findall(r"What is (\d+) \+ (\d+)\?", last_question(prompt))[-1]
    return str(int(a) + int(b))


def played(dataset) -> list:
    return [builder for i in range(len(dataset)) for builder in dataset.get_batch(i)]


@pytest.mark.parametrize("size", SIZES)
def test_builtin_env_plays_each_held_out_problem_once(renderer, size):
    # 25 problems (operands 0..4); the fraction holds out exactly `size` of them, fewer than the 2 x 4 test slots
    _, test = run_sync(
        make_env_dataset("arithmetic", renderer, max_operand=4, held_out_fraction=size / 25, batch_size=4, group_size=2)
    )
    problems = [(b.a, b.b) for b in played(test)]
    assert len(problems) == size == len(set(problems))
    result = evaluate(TextPolicySampler(renderer, solve_sum), test)
    assert (result.num_problems, result.num_episodes) == (size, 2 * size)
    assert result.pass_at_k[1] == 1.0


def test_builtin_test_split_draws_distinct_problems(renderer):
    _, test = run_sync(make_env_dataset("arithmetic", renderer, max_operand=2, batch_size=4, num_test_batches=3))
    problems = [(b.a, b.b) for b in played(test)]  # 9 problems for 12 slots: each once, the last batch shorter
    assert sorted(problems) == [(a, b) for a in range(3) for b in range(3)]
    assert [len(test.get_batch(i)) for i in range(len(test))] == [4, 4, 1]


@pytest.mark.parametrize("size", SIZES)
def test_reasoning_gym_task_plays_each_problem_once(renderer, size):
    pytest.importorskip("reasoning_gym")
    config = {"size": 40, "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    batches = -(-size // 4)  # batches of 4: the last one holds more than the `size` asked for unless size % 4 == 0
    _, test = run_sync(
        make_env_dataset(
            "reasoning_gym/basic_arithmetic",
            renderer,
            **config,
            batch_size=4,
            num_test_batches=batches,
            group_size=2,
        )
    )
    envs = [run_sync(builder.make_envs)[0] for builder in played(test)]
    questions = [env.entry["question"] for env in envs]
    assert len(questions) == 4 * batches == len(set(questions))  # no question twice in the split
    result = evaluate(TextPolicySampler(renderer, lambda prompt: "0"), test, num_problems=size)
    assert (result.num_problems, result.num_episodes) == (size, 2 * size)
