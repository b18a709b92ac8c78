"""Does GRPO through EnvGRPOTrainer make the tiny model better at the built-in envs?

For each env (arithmetic, guess_number) and each seed: the mean total reward of the model on the env's held-out
test set (sampling at temperature 1, a fixed number of episodes), then N training steps of EnvGRPOTrainer, then
the same evaluation again. Prints before / after / gain per env and seed.

Target: a clear, repeatable rise on both envs (every seed's "after" above its "before").

    python bench/learning.py                       # both envs, seeds 0 and 1, 60 steps
    python bench/learning.py --envs arithmetic --steps 60 --seeds 0
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, HFSampler, Renderer, RolloutBudget  # noqa: E402
from trl_envs import make_env_dataset  # noqa: E402
from trl_envs.rollout.evaluation import evaluate  # noqa: E402
from trl_envs.rollout.engine import run_sync  # noqa: E402
from trl_envs.tiny_model import build_tiny_model  # noqa: E402

MAX_TURNS = {"arithmetic": 1, "guess_number": 6}
ENV_KWARGS = {"arithmetic": {"max_operand": 3}}  # as scripts/train_grpo.py's default run


def run(env: str, seed: int, args, model_path: str, tokenizer) -> tuple[float, float, float]:
    renderer = Renderer(tokenizer)
    builder = make_env_dataset(env, renderer, group_size=args.group_size, batch_size=args.groups_per_step,
                                   num_batches=args.steps * 2, num_test_batches=args.eval_batches, seed=seed,
                                   **ENV_KWARGS.get(env, {}))
    _, test = run_sync(builder)
    budget = RolloutBudget(max_turns=MAX_TURNS[env], max_tokens_per_turn=args.max_tokens)
    with tempfile.TemporaryDirectory() as out:
        config = EnvGRPOConfig(
            output_dir=out, use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False,
            disable_tqdm=True, seed=seed, num_generations=args.group_size,
            per_device_train_batch_size=args.group_size * args.groups_per_step, max_steps=args.steps,
            learning_rate=args.lr, beta=0.0, max_completion_length=args.max_tokens, max_turns=MAX_TURNS[env],
            logging_steps=args.steps, save_strategy="no")
        trainer = EnvGRPOTrainer(model_path, config, builder, processing_class=tokenizer)
        sampler = HFSampler(trainer.model, tokenizer, temperature=1.0)
        torch.manual_seed(1000 + seed)
        before = evaluate(sampler, test, budget=budget).mean_reward
        start = time.perf_counter()
        trainer.train()
        train_seconds = time.perf_counter() - start
        torch.manual_seed(1000 + seed)
        after = evaluate(sampler, test, budget=budget).mean_reward
    return before, after, train_seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["arithmetic", "guess_number"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--group_size", type=int, default=8)
    parser.add_argument("--groups_per_step", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max_tokens", type=int, default=8, help="sampled tokens per turn")
    parser.add_argument("--eval_batches", type=int, default=8, help="test batches (x groups_per_step x group_size "
                                                                    "episodes)")
    parser.add_argument("--model", default=None, help="model id or path (default: the offline tiny model)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every run improved")
    args = parser.parse_args()

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model_path = args.model or build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    episodes = args.eval_batches * args.groups_per_step * args.group_size
    print(f"model {model_path}; {args.steps} steps of {args.groups_per_step}x{args.group_size} episodes; "
          f"evaluation on {episodes} held-out episodes", flush=True)
    improved = True
    for env in args.envs:
        for seed in args.seeds:
            before, after, seconds = run(env, seed, args, model_path, tokenizer)
            improved &= after > before
            print(f"{env:13s} seed {seed}: mean reward before {before:+.3f}  after {after:+.3f}  "
                  f"gain {after - before:+.3f}  ({seconds:.0f} s training)", flush=True)
    return 0 if improved or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
