"""What do environments cost over plain TRL? Per-step wall time of EnvGRPOTrainer vs GRPOTrainer.

The same single-turn arithmetic task, model and settings are trained (a) by TRL's plain ``GRPOTrainer`` on a prompt
dataset with an equivalent reward function (1 right / 0 wrong, -0.1 when the answer is not a bare integer ending
on EOS) and (b) by ``EnvGRPOTrainer`` on the built-in ``arithmetic`` env. Both generate with transformers
``generate``. Runs alternate (plain, env, plain, env, ...) so drift on a shared machine hits both.

Prints the median per-step wall time of each (first steps skipped as warm-up) and their ratio env/plain.
Target: ratio <= 1.05.

    python bench/vs_trl_grpo.py
    python bench/vs_trl_grpo.py --steps 20 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, Renderer  # noqa: E402
from trl_envs.envs.arithmetic import ArithmeticDatasetBuilder, question  # noqa: E402
from trl_envs.tiny_model import build_tiny_model  # noqa: E402


class StepTimer(TrainerCallback):
    def __init__(self):
        self.times: list[float] = []

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter() - self._start)


def common(out: str, args) -> dict:
    return dict(output_dir=out, use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False,
                disable_tqdm=True, seed=0, num_generations=args.group_size,
                per_device_train_batch_size=args.group_size * args.groups_per_step, max_steps=args.steps,
                learning_rate=args.lr, beta=0.0, max_completion_length=args.max_tokens, logging_steps=10_000,
                save_strategy="no", shuffle_dataset=False)


def plain_dataset(n: int, max_operand: int = 9) -> Dataset:
    rng = random.Random("vs_trl_grpo")
    rows = [(rng.randint(0, max_operand), rng.randint(0, max_operand)) for _ in range(n)]
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": question(a, b)}] for a, b in rows],
                              "answer": [a + b for a, b in rows]})


def make_reward(eos_id: int):
    integer = re.compile(r"^-?\d+$")

    def arithmetic_reward(completions, completion_ids, answer, **kwargs):
        out = []
        for c, ids, ans in zip(completions, completion_ids, answer):
            text = c[0]["content"].strip()
            format_ok = bool(integer.match(text)) and len(ids) > 0 and ids[-1] == eos_id
            correct = bool(integer.match(text)) and int(text) == ans
            out.append(0.1 * (float(format_ok) - 1.0) + float(correct))
        return out

    return arithmetic_reward


def time_plain(model_path, tokenizer, args) -> list[float]:
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        trainer = GRPOTrainer(model_path, reward_funcs=[make_reward(tokenizer.eos_token_id)],
                              args=GRPOConfig(**common(out, args)), train_dataset=plain_dataset(4000),
                              processing_class=tokenizer, callbacks=[timer])
        trainer.train()
    return timer.times


def time_env(model_path, tokenizer, args) -> list[float]:
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        builder = ArithmeticDatasetBuilder(Renderer(tokenizer), batch_size=args.groups_per_step,
                                           group_size=args.group_size, num_batches=1000)
        trainer = EnvGRPOTrainer(model_path, EnvGRPOConfig(**common(out, args), max_turns=1), builder,
                                 processing_class=tokenizer, callbacks=[timer])
        trainer.train()
    return timer.times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3, help="first steps of each run left out")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--group_size", type=int, default=8)
    parser.add_argument("--groups_per_step", type=int, default=4)
    parser.add_argument("--max_tokens", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--model", default=None)
    parser.add_argument("--check", action="store_true", help="exit 1 if the ratio is above 1.05")
    args = parser.parse_args()

    model_path = args.model or build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    plain, env = [], []
    for r in range(args.repeats):
        plain += time_plain(model_path, tokenizer, args)[args.warmup:]
        env += time_env(model_path, tokenizer, args)[args.warmup:]
        print(f"repeat {r}: plain median {statistics.median(plain):.3f} s/step, "
              f"env median {statistics.median(env):.3f} s/step", flush=True)
    ratio = statistics.median(env) / statistics.median(plain)
    print(f"plain GRPOTrainer median step time: {statistics.median(plain):.3f} s ({len(plain)} steps)")
    print(f"EnvGRPOTrainer median step time:    {statistics.median(env):.3f} s ({len(env)} steps)")
    print(f"ratio env/plain: {ratio:.3f} (target <= 1.05)")
    return 1 if args.check and ratio > 1.05 else 0


if __name__ == "__main__":
    sys.exit(main())
