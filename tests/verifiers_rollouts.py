"""Roll out one batch of a verifiers environment (tests/fixtures/verifiers_envs) through trl_envs.verifiers with a
scripted policy, and print what the trainer would get as JSON. Run by tests/test_verifiers_env.py in a fresh
interpreter (verifiers 0.4 needs mcp 2, which the test's own interpreter may not have).

    python tests/verifiers_rollouts.py vf_guess --policy guess --batch_size 2 --group_size 2

``--scenarios JSON`` runs several in one interpreter (``{"name": [the arguments above], ...}``, plus the argument
list ``["split_counts"]`` for the test split's batches at several sizes) and prints ``{"name": {"result": ...} or
{"error": traceback}}``: each fresh interpreter costs seconds of imports, which the tests then pay once.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import traceback


def turns(prompt: str) -> list[str]:
    """The ChatML turns of a rendered prompt: ``"user\\n..."``, ``"assistant\\n..."``, ``"tool\\n..."``."""
    return [t.split("<|im_end|>")[0] for t in prompt.split("<|im_start|>")[1:]]


def echo_policy(prompt: str) -> str:
    return re.findall(r"Say the word (\w+)", prompt)[-1]


def wrong_policy(prompt: str) -> str:
    return "banana"


def guess_policy(prompt: str) -> str:
    """Binary search over 1..8 from the env's "Higher." / "Lower." answers."""
    lo, hi, last = 1, 8, None
    for turn in turns(prompt):
        role, _, text = turn.partition("\n")
        if role == "assistant" and text.strip().isdigit():
            last = int(text)
        elif role == "user" and last is not None:
            lo, hi = (last + 1, hi) if "Higher" in text else (lo, last - 1) if "Lower" in text else (lo, hi)
    return str((lo + hi) // 2)


def calc_policy(prompt: str) -> str:
    """Calls the env's ``calc_add`` tool, then answers with its result."""
    role, _, text = turns(prompt)[-2].partition("\n")
    if role == "tool":
        return f"The answer is {text}"
    a, b = re.findall(r"What is (\d+) \+ (\d+)", prompt)[-1]
    call = {"name": "calc_add", "arguments": {"a": int(a), "b": int(b)}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


POLICIES = {"echo": echo_policy, "wrong": wrong_policy, "guess": guess_policy, "calc": calc_policy}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("env")
    p.add_argument("--policy", required=True, choices=sorted(POLICIES))
    p.add_argument("--batch_size", type=int, default=2)
    p.add_argument("--group_size", type=int, default=2)
    p.add_argument("--env_kwargs", default="{}")
    p.add_argument("--as_object", action="store_true", help="pass a loaded vf.Env instead of the id")
    p.add_argument("--split", default="train", choices=["train", "test"])
    p.add_argument("--max_turns", type=int, default=8)
    return p.parse_args(argv)


@functools.cache
def tokenizer_and_renderer():
    from transformers import AutoTokenizer

    from trl_envs import Renderer
    from trl_envs.tiny_model import tiny_model_path

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    return tokenizer, Renderer(tokenizer)


def rollout(argv: list[str]) -> dict:
    """One batch of the env ``argv`` names, as the trainer would get it."""
    args = parse_args(argv)
    from trl_envs.registry import make_env_dataset
    from trl_envs.rollout.engine import RolloutBudget, run_rollout_batch
    from trl_envs.rollout.event_loop import run_sync
    from trl_envs.samplers.text_policy import TextPolicySampler
    from trl_envs.verifiers import VerifiersDatasetBuilder, env_config, load_env

    tokenizer, renderer = tokenizer_and_renderer()
    options = json.loads(args.env_kwargs)
    if args.as_object:
        env = load_env(env_config(args.env, options))
        builder = VerifiersDatasetBuilder(env, renderer, batch_size=args.batch_size, group_size=args.group_size)
    else:
        builder = make_env_dataset(
            f"verifiers/{args.env}", renderer, group_size=args.group_size, groups_per_batch=args.batch_size, **options
        )
    train, test = run_sync(builder)
    dataset = train if args.split == "train" else test
    result = run_rollout_batch(
        dataset.get_batch(0),
        TextPolicySampler(renderer, POLICIES[args.policy]),
        RolloutBudget(max_turns=args.max_turns),
    )
    groups = []
    for group in result.groups:
        trajectories = []
        for trajectory in group.trajectories:
            last = trajectory.transitions[-1]
            extends = True
            for before, after in zip(trajectory.transitions, trajectory.transitions[1:]):
                expected = list(before.ob) + list(before.ac.tokens)
                extends &= list(after.ob)[: len(expected)] == expected
            sequence = list(last.ob) + list(last.ac.tokens)
            trajectories.append(
                {
                    "reward": sum(t.reward for t in trajectory.transitions),
                    "metrics": last.metrics,
                    "turns": len(trajectory.transitions),
                    "stop_reason": trajectory.stop_reason,
                    "extends": extends,
                    "text": tokenizer.decode(sequence, skip_special_tokens=False),
                }
            )
        groups.append({"tags": list(group.tags), "trajectories": trajectories})
    import psutil

    left = [p.cmdline() for p in psutil.Process().children(recursive=True) if p.is_running()]
    return {"groups": groups, "errors": result.error_counts, "test_split": test is not None, "processes_left": left}


def split_counts() -> dict:
    """The test split's batches (the words of their tasks) for 1, 2, 3, 5 and 7 held-out tasks in batches of 4, and
    ``[num_problems, num_episodes, mean_reward]`` of an evaluation of 3 of them in batches of 2."""
    from trl_envs.registry import make_env_dataset
    from trl_envs.rollout.evaluation import evaluate
    from trl_envs.rollout.event_loop import run_sync
    from trl_envs.samplers.text_policy import TextPolicySampler

    _, renderer = tokenizer_and_renderer()
    out: dict = {}
    for size in (1, 2, 3, 5, 7):
        builder = make_env_dataset(
            "verifiers/vf_echo",
            renderer,
            taskset={"num_tasks": 8},
            num_test_tasks=size,
            groups_per_batch=4,
            group_size=2,
        )
        _, test = run_sync(builder)
        out[size] = [[b.task.data.word for b in test.get_batch(i)] for i in range(len(test))]
    _, test = run_sync(
        make_env_dataset("verifiers/vf_echo", renderer, taskset={"num_tasks": 8}, num_test_tasks=3, groups_per_batch=2)
    )
    result = evaluate(
        TextPolicySampler(renderer, lambda prompt: prompt.rsplit("Say the word ", 1)[-1].split(".")[0]), test
    )
    out["played"] = [result.num_problems, result.num_episodes, result.mean_reward]
    return out


def main() -> None:
    if sys.argv[1:2] != ["--scenarios"]:
        print(json.dumps(rollout(sys.argv[1:])))
        return
    out = {}
    for name, argv in json.loads(sys.argv[2]).items():
        try:
            out[name] = {"result": split_counts() if argv == ["split_counts"] else rollout(argv)}
        except Exception:
            out[name] = {"error": traceback.format_exc()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
