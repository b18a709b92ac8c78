"""Trajectory-level vs per-turn credit assignment on guess_number, with the same budget.

For each seed and each credit setting (``credit_assignment="trajectory"``, GRPO's one advantage per episode, and
``"per_turn"``, reward-to-go per turn baselined across the group), train the tiny model with EnvGRPOTrainer for the
same number of steps on the same envs, then evaluate on the same held-out games (sampling, same torch seed).
Prints, side by side: mean total reward, win rate, and turns to solve (mean guesses of the won games).

    python bench/credit.py                      # seeds 0 and 1, 40 steps each
    python bench/credit.py --seeds 0 --steps 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import _common  # noqa: F401  (offline settings)
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, HFSampler, Renderer, RolloutBudget, make_env_dataset
from trl_envs.rollout.evaluation import evaluate
from trl_envs.rollout.event_loop import run_sync
from trl_envs.tiny_model import build_tiny_model

MAX_TURNS = 6


def solved_turns(groups) -> tuple[float, float]:
    """(win rate, mean number of guesses of the won games)."""
    trajectories = [t for g in groups if g is not None for t in g.trajectories]
    won = [len(t.transitions) for t in trajectories if t.transitions[-1].metrics.get("win") == 1.0]
    return len(won) / len(trajectories), (statistics.fmean(won) if won else float("nan"))


def env_builder(tokenizer, seed: int, args):
    return make_env_dataset(
        "guess_number",
        Renderer(tokenizer),
        group_size=args.group_size,
        batch_size=args.groups_per_step,
        num_batches=args.steps * 2,
        num_test_batches=args.eval_batches,
        seed=seed,
    )


def evaluate_model(model, tokenizer, seed: int, args) -> dict[str, float]:
    """Held-out games of ``seed``'s test set, sampled at temperature 1 after seeding torch the same way."""
    _, test = run_sync(env_builder(tokenizer, seed, args))
    torch.manual_seed(1000 + seed)
    result = evaluate(
        HFSampler(model, tokenizer, temperature=1.0),
        test,
        budget=RolloutBudget(max_turns=MAX_TURNS, max_tokens_per_turn=args.max_tokens),
    )
    win_rate, turns = solved_turns(result.groups)
    return {"reward": result.mean_reward, "win": win_rate, "turns": turns}


def run(credit: str, seed: int, args, model_path: str, tokenizer) -> dict[str, float]:
    builder = env_builder(tokenizer, seed, args)
    with tempfile.TemporaryDirectory() as out:
        config = EnvGRPOConfig(
            output_dir=out,
            use_cpu=True,
            bf16=False,
            report_to="none",
            gradient_checkpointing=False,
            disable_tqdm=True,
            seed=seed,
            num_generations=args.group_size,
            per_device_train_batch_size=args.group_size * args.groups_per_step,
            max_steps=args.steps,
            learning_rate=args.lr,
            beta=0.0,
            max_completion_length=args.max_tokens,
            max_turns=MAX_TURNS,
            logging_steps=args.steps,
            save_strategy="no",
            loss_type=args.loss_type,
            credit_assignment=credit,
        )
        trainer = EnvGRPOTrainer(model_path, config, builder, processing_class=tokenizer)
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        return evaluate_model(trainer.model.eval(), tokenizer, seed, args) | {"seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--group_size", type=int, default=8)
    parser.add_argument("--groups_per_step", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--loss_type", default="dr_grpo", help="dr_grpo: a constant normaliser, no length bias")
    parser.add_argument("--max_tokens", type=int, default=8, help="sampled tokens per turn")
    parser.add_argument("--eval_batches", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    model_path = build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    episodes = args.eval_batches * args.groups_per_step * args.group_size
    print(
        f"guess_number, {args.steps} steps of {args.groups_per_step}x{args.group_size} episodes, loss "
        f"{args.loss_type}; evaluation on {episodes} held-out games",
        flush=True,
    )
    rows = {"trajectory": [], "per_turn": []}
    untrained = AutoModelForCausalLM.from_pretrained(model_path, dtype="float32").eval()
    for seed in args.seeds:
        r = evaluate_model(untrained, tokenizer, seed, args)
        print(
            f"{'untrained':10s} seed {seed}: reward {r['reward']:+.3f}  win {r['win']:.3f}  "
            f"turns to solve {r['turns']:.2f}",
            flush=True,
        )
        for credit in rows:
            r = run(credit, seed, args, model_path, tokenizer)
            rows[credit].append(r)
            print(
                f"{credit:10s} seed {seed}: reward {r['reward']:+.3f}  win {r['win']:.3f}  "
                f"turns to solve {r['turns']:.2f}  ({r['seconds']:.0f} s training)",
                flush=True,
            )
    for credit, results in rows.items():
        print(
            f"{credit:10s} mean over seeds: reward {statistics.fmean(r['reward'] for r in results):+.3f}  "
            f"win {statistics.fmean(r['win'] for r in results):.3f}  "
            f"turns to solve {statistics.fmean(r['turns'] for r in results):.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
