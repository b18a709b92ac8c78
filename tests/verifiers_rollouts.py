"""Roll out one batch of a verifiers environment (tests/fixtures/verifiers_envs) through trl_envs.verifiers with a
scripted policy, and print what the trainer would get as JSON. Run by tests/test_verifiers_env.py in a fresh
interpreter (verifiers 0.4 needs mcp 2, which the test's own interpreter may not have).

    python tests/verifiers_rollouts.py vf_guess --policy guess --batch_size 2 --group_size 2
"""

from __future__ import annotations

import argparse
import json
import re


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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("env")
    p.add_argument("--policy", required=True, choices=sorted(POLICIES))
    p.add_argument("--batch_size", type=int, default=2)
    p.add_argument("--group_size", type=int, default=2)
    p.add_argument("--env_kwargs", default="{}")
    p.add_argument("--as_object", action="store_true", help="pass a loaded vf.Env instead of the id")
    p.add_argument("--split", default="train", choices=["train", "test"])
    p.add_argument("--max_turns", type=int, default=8)
    args = p.parse_args()

    from transformers import AutoTokenizer

    from trl_envs import Renderer
    from trl_envs.registry import make_env_dataset
    from trl_envs.rollout.engine import RolloutBudget, run_rollout_batch
    from trl_envs.rollout.event_loop import run_sync
    from trl_envs.samplers.text_policy import TextPolicySampler
    from trl_envs.tiny_model import build_tiny_model
    from trl_envs.verifiers import VerifiersDatasetBuilder, env_config, load_env

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model())
    renderer = Renderer(tokenizer)
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
            sequence = list(trajectory.transitions[0].ob)
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
    out = {"groups": groups, "errors": result.error_counts, "test_split": test is not None, "processes_left": left}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
