"""Env-driven DPO vs GRPO on ``arithmetic``: same tiny model, same number of sampled trajectories.

Both start from the offline tiny model. GRPO (EnvGRPOTrainer) trains ``steps`` steps of ``groups_per_step`` groups;
env-driven DPO (EnvDPOTrainer) trains ``rounds`` rounds of ``groups_per_round`` groups (best vs worst trajectory of
each group), with ``rounds * groups_per_round == steps * groups_per_step`` so both sample exactly as many
trajectories (``group_size`` per group). Before and after, the mean total env reward on the env's held-out test set
(sampling at temperature 1, same seed) is measured; the two are printed side by side.

    python bench/dpo.py                        # seed 0, 1280 trajectories each
    python bench/dpo.py --seeds 0 1 --rounds 20 --groups_per_round 8
    python bench/dpo.py --env guess_number      # the multi-turn env (max 6 guesses)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore", category=FutureWarning)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, set_seed  # noqa: E402

from trl_envs import (  # noqa: E402
    EnvDPOConfig,
    EnvDPOTrainer,
    EnvGRPOConfig,
    EnvGRPOTrainer,
    HFSampler,
    Renderer,
    make_env_dataset,  # noqa: E402
)
from trl_envs.rollout.engine import RolloutBudget  # noqa: E402
from trl_envs.rollout.evaluation import evaluate  # noqa: E402
from trl_envs.rollout.event_loop import run_sync  # noqa: E402
from trl_envs.tiny_model import build_tiny_model  # noqa: E402

COMMON = dict(
    use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False, disable_tqdm=True, save_strategy="no"
)


DETAIL = {"arithmetic": ("correct", "format"), "guess_number": ("win", "turns")}
MAX_TURNS = {"arithmetic": 1, "guess_number": 6}


def evaluate_model(model, tokenizer, test, budget, seed: int, env: str) -> tuple[float, str]:
    """Mean total reward on the test envs, and a few env metrics as text."""
    torch.manual_seed(1000 + seed)
    result = evaluate(HFSampler(model, tokenizer, temperature=1.0), test, budget=budget)
    detail = ", ".join(
        f"{k} {result.metrics[f'env/all/{k}']:.2f}" for k in DETAIL[env] if f"env/all/{k}" in result.metrics
    )
    return result.mean_reward, detail


def run_grpo(args, seed, model_path, tokenizer, renderer, budget, out) -> tuple[object, float]:
    steps = args.rounds * args.groups_per_round // args.groups_per_step
    builder = make_env_dataset(
        args.env, renderer, group_size=args.group_size, batch_size=args.groups_per_step, num_batches=steps, seed=seed
    )
    config = EnvGRPOConfig(
        output_dir=out,
        seed=seed,
        num_generations=args.group_size,
        per_device_train_batch_size=args.group_size * args.groups_per_step,
        max_steps=steps,
        learning_rate=args.grpo_lr,
        beta=0.0,
        max_completion_length=args.max_tokens,
        max_turns=MAX_TURNS[args.env],
        logging_steps=steps,
        **COMMON,
    )
    trainer = EnvGRPOTrainer(model_path, config, builder, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    return trainer.model, time.perf_counter() - start


def run_dpo(args, seed, model_path, tokenizer, renderer, budget, out) -> tuple[object, float]:
    builder = make_env_dataset(
        args.env,
        renderer,
        group_size=args.group_size,
        batch_size=args.groups_per_round,
        num_batches=args.rounds,
        seed=seed,
    )
    train, _ = run_sync(builder)
    config = EnvDPOConfig(
        output_dir=out,
        seed=seed,
        num_rounds=args.rounds,
        batches_per_round=1,
        per_device_train_batch_size=args.dpo_batch_size,
        num_train_epochs=args.dpo_epochs,
        learning_rate=args.dpo_lr,
        lr_scheduler_type="constant",
        beta=args.beta,
        loss_type=args.dpo_loss_type,
        max_tokens_per_turn=args.max_tokens,
        max_turns=MAX_TURNS[args.env],
        logging_steps=10_000,
        **COMMON,
    )
    trainer = EnvDPOTrainer(model_path, args=config, env_dataset=train, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    pairs = sum(h["pairs/pairs"] for h in trainer.round_history)
    print(f"  dpo: {pairs:.0f} pairs from {args.rounds * args.groups_per_round} groups", flush=True)
    return trainer.model, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=sorted(MAX_TURNS), default="arithmetic")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--group_size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10, help="DPO rounds")
    parser.add_argument("--groups_per_round", type=int, default=16, help="DPO env groups sampled per round")
    parser.add_argument("--groups_per_step", type=int, default=4, help="GRPO env groups per step")
    parser.add_argument("--grpo_lr", type=float, default=3e-4)
    parser.add_argument("--dpo_lr", type=float, default=1e-4)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument(
        "--dpo_loss_type",
        nargs="+",
        default=["sigmoid"],
        help="TRL DPO loss types, e.g. 'sigmoid sft' (DPO + NLL on the chosen answer, as iterative RPO)",
    )
    parser.add_argument("--skip_grpo", action="store_true", help="run only DPO (for tuning)")
    parser.add_argument("--dpo_batch_size", type=int, default=8)
    parser.add_argument("--dpo_epochs", type=float, default=2.0, help="DPO epochs over each round's pairs")
    parser.add_argument("--max_tokens", type=int, default=8)
    parser.add_argument("--eval_batches", type=int, default=8, help="test batches of groups_per_step x group_size")
    parser.add_argument("--threads", type=int, default=max(1, os.cpu_count() or 1))
    parser.add_argument("--model", default=None, help="model id or path (default: the offline tiny model)")
    args = parser.parse_args()
    if (args.rounds * args.groups_per_round) % args.groups_per_step:
        parser.error("rounds * groups_per_round must be a multiple of groups_per_step (equal trajectory counts)")

    torch.set_num_threads(args.threads)
    model_path = args.model or build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    renderer = Renderer(tokenizer)
    budget = RolloutBudget(max_turns=MAX_TURNS[args.env], max_tokens_per_turn=args.max_tokens)
    trajectories = args.rounds * args.groups_per_round * args.group_size
    print(
        f"model {model_path}; {args.env}; {trajectories} sampled trajectories per method; evaluation on "
        f"{args.eval_batches * args.groups_per_step * args.group_size} held-out episodes (temperature 1)",
        flush=True,
    )
    rows = []
    for seed in args.seeds:
        _, test = run_sync(
            make_env_dataset(
                args.env,
                renderer,
                group_size=args.group_size,
                batch_size=args.groups_per_step,
                num_test_batches=args.eval_batches,
                seed=seed,
            )
        )
        methods = [("DPO", run_dpo)] if args.skip_grpo else [("GRPO", run_grpo), ("DPO", run_dpo)]
        before = evaluate_model(
            AutoModelForCausalLM.from_pretrained(model_path), tokenizer, test, budget, seed, args.env
        )
        results = {}
        for name, run in methods:
            set_seed(seed)
            with tempfile.TemporaryDirectory() as out:
                model, seconds = run(args, seed, model_path, tokenizer, renderer, budget, out)
                results[name] = (*evaluate_model(model, tokenizer, test, budget, seed, args.env), seconds)
        rows.append((before[0], {name: r[0] for name, r in results.items()}))
        print(f"seed {seed}: mean env reward (test envs)", flush=True)
        print(f"  {'model':<8} {'reward':>7}  detail", flush=True)
        print(f"  {'before':<8} {before[0]:+7.3f}  {before[1]}", flush=True)
        for name, (reward, detail, seconds) in results.items():
            print(f"  {name:<8} {reward:+7.3f}  {detail}  ({seconds:.0f} s training)", flush=True)
    if len(rows) > 1:
        print(
            f"mean over {len(rows)} seeds: before {sum(r[0] for r in rows) / len(rows):+.3f} | "
            + " | ".join(f"{name} {sum(r[1][name] for r in rows) / len(rows):+.3f}" for name in rows[0][1]),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
