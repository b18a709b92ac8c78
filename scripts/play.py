# Copyright the trl_envs authors. Apache-2.0.
"""Play a built-in environment by hand: you type the model's answers.

    python scripts/play.py                               # arithmetic
    python scripts/play.py --env guess_number
    printf '8\\n4\\n6\\n' | python scripts/play.py --env guess_number    # answers read from a pipe

You see exactly what the model would see: the observation (the token context, shown as text with the chat
template's special tokens), then you answer. Your text is tokenized and ended with the end-of-turn token, as if the
model had sampled it, and handed to the env's ``step``. After the episode you get every step's reward, its metrics
and the total. The env runs through the same rollout code as training (``do_group_rollout``, a group of one).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from transformers import AutoTokenizer

from trl_envs import Renderer, RolloutBudget, TokensWithLogprobs, TrajectoryGroup, do_group_rollout
from trl_envs.envs import BUILTIN_ENVS, make_dataset_builder
from trl_envs.rollouts import run_sync


class HumanPolicy:
    """A policy whose actions are typed on stdin (``await policy(prompt, stop, max_tokens)``, like the sampler)."""

    def __init__(self, tokenizer, renderer: Renderer, show_tokens: bool = False):
        self.tokenizer, self.renderer, self.show_tokens = tokenizer, renderer, show_tokens
        self.seen = 0  # tokens of the context already shown
        self.echo = not sys.stdin.isatty()  # piped answers are echoed so the transcript reads like a dialogue

    async def __call__(self, prompt: list[int], stop, max_tokens: int) -> TokensWithLogprobs:
        new = prompt[self.seen:]
        print(self.tokenizer.decode(new, skip_special_tokens=False), end="")
        if self.show_tokens:
            print(f"\n    [observation: {len(prompt)} tokens, {len(new)} new: {new}]")
        try:
            text = input("" if not self.show_tokens else "your answer> ")
        except EOFError:
            raise SystemExit("\n(no more input: episode abandoned)") from None
        if self.echo:
            print(text)
        tokens = self.tokenizer.encode(text, add_special_tokens=False)
        if len(tokens) < max_tokens:  # ended by the end-of-turn token, as a model ends its turn
            tokens, finish = tokens + [self.renderer.end_of_turn_token_id], "stop"
        else:  # cut by the token budget, as the sampler would
            tokens, finish = tokens[:max_tokens], "length"
        print(self.tokenizer.decode(tokens[len(tokens) - (finish == "stop"):], skip_special_tokens=False), end="")
        if self.show_tokens:
            print(f"\n    [action: {tokens}]", end="")
        self.seen = len(prompt) + len(tokens)
        return TokensWithLogprobs(tokens, None, finish)


def report(group: TrajectoryGroup) -> None:
    (trajectory,) = group.trajectories
    print("\n--- episode over:", trajectory.stop_reason)
    for turn, tr in enumerate(trajectory.transitions):
        logs = ", ".join(f"{k}={v!r}" for k, v in tr.logs.items())
        print(f"turn {turn}: reward {tr.reward:+.2f}  metrics {tr.metrics}" + (f"  ({logs})" if logs else ""))
    if group.group_rewards[0]:
        print(f"group reward {group.group_rewards[0]:+.2f}  {group.group_metrics[0]}")
    print(f"total reward {group.get_total_rewards()[0]:+.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Play a built-in env by hand: you type the model's answers.")
    parser.add_argument("--env", default="arithmetic", choices=sorted(BUILTIN_ENVS))
    parser.add_argument("--model_name_or_path", default=None,
                        help="whose tokenizer and chat template to use (default: the offline tiny model)")
    parser.add_argument("--seed", type=int, default=0, help="dataset seed")
    parser.add_argument("--index", type=int, default=0, help="which problem of the training set to play")
    parser.add_argument("--max_tokens", type=int, default=32, help="token budget of one answer")
    parser.add_argument("--max_turns", type=int, default=16)
    parser.add_argument("--show_tokens", action="store_true", help="also print the token ids")
    args = parser.parse_args(argv)

    if args.model_name_or_path is None:
        from trl_envs.tiny_model import build_tiny_model

        args.model_name_or_path = build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    renderer = Renderer(tokenizer)
    train, _ = run_sync(make_dataset_builder(args.env, renderer, group_size=1, batch_size=1,
                                             num_batches=args.index + 1, seed=args.seed))
    (builder,) = train.get_batch(args.index)
    budget = RolloutBudget(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens)
    group = asyncio.run(do_group_rollout(builder, HumanPolicy(tokenizer, renderer, args.show_tokens), budget))
    report(group)


if __name__ == "__main__":
    main()
