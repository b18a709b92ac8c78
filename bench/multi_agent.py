"""Two-player self-play through EnvGRPOTrainer: tinker-cookbook's TextArena TicTacToe, unchanged, against our own
tic_tac_toe, on the tiny model. Both sides: 4 games (8 player episodes) per step, group = one game (2 players), at
most 8 tokens per move, `sampler_max_wait_s` at the trainer default (30 s).

Measured per side, over the measured steps (after `--warmup` steps): the trainer's logged `step_time`, the rollout's
wall time, its generation calls (one per move number: every game's n-th move goes out together) and the moves made
(player actions), the valve flushes (generation calls the 30 s `max_wait_s` valve forced) and the quiet-loop flushes
(calls sent because every episode that had not asked was blocked on its sibling). Time per move = step time / generation
calls. Targets: cookbook per move <= 2x ours, and 0 valve flushes on both sides.

    python bench/multi_agent.py                 # 1 warm-up step + 3 measured steps per side
    python bench/multi_agent.py --steps 10 --check

Needs tinker-cookbook and textarena (docs/from_tinker.md). The cookbook's observations repeat the whole game
(~400 tokens after one move, ~800 after two), so with the tiny model's 1,024 positions its games end by the context
budget after two or three moves per player (the player left waiting is then ended: stop reason `sibling_ended`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import _common  # noqa: F401 - offline settings
from _common import add_common_args, setup_torch


def run_side(side: str, steps: int, warmup: int, seed: int, max_wait_s: float) -> dict[str, float]:
    from transformers import AutoTokenizer, PrinterCallback

    from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, Renderer
    from trl_envs.tiny_model import build_tiny_model

    path = build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    total = steps + warmup
    if side == "cookbook":
        from tinker_cookbook.recipes.multiplayer_rl.text_arena.env import TwoPlayerTextArenaDatasetBuilder

        from trl_envs.tinker import adapt

        envs = adapt(
            TwoPlayerTextArenaDatasetBuilder(
                batch_size=8,
                num_train_datapoints=8 * total,
                num_test_datapoints=2,
                model_name=path,
                game_name="TicTacToe-v0",
                renderer_name="qwen3_instruct",
                test_opponent="random",
            )
        )
    else:
        from trl_envs.envs.tic_tac_toe import TicTacToeDatasetBuilder

        envs = TicTacToeDatasetBuilder(Renderer(tokenizer), batch_size=4, group_size=2, num_batches=total, seed=seed)
    rollouts: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as out:
        config = EnvGRPOConfig(
            output_dir=out,
            use_cpu=True,
            bf16=False,
            report_to="none",
            gradient_checkpointing=False,
            disable_tqdm=True,
            seed=seed,
            num_generations=2,
            per_device_train_batch_size=8,
            max_steps=total,
            learning_rate=1e-4,
            beta=0.0,
            max_completion_length=8,
            max_turns=9,
            logging_steps=1,
            save_strategy="no",
            sampler_max_wait_s=max_wait_s,
        )
        trainer = EnvGRPOTrainer(path, config, envs, processing_class=tokenizer)
        trainer.remove_callback(PrinterCallback)
        real_rollout = trainer._rollout

        def recording_rollout(prompts):
            rows = real_rollout(prompts)
            r = trainer.last_rollout
            rollouts.append(
                {
                    "wall": r.wall_seconds,
                    "sampling": r.sampler_seconds,
                    "calls": r.num_sampler_calls,
                    "valve": r.num_valve_flushes,
                    "idle": r.num_idle_flushes,
                    "ended": r.num_sibling_endings,
                    "moves": sum(len(t.transitions) for g in r.groups if g for t in g.trajectories),
                    "tokens": sum(len(tr.ob) for g in r.groups if g for t in g.trajectories for tr in t.transitions),
                }
            )
            return rows

        trainer._rollout = recording_rollout
        trainer.train()
    step_times = [float(h["step_time"]) for h in trainer.state.log_history if "step_time" in h][warmup:]
    measured = rollouts[warmup:]
    calls = sum(r["calls"] for r in measured)
    return {
        "steps": len(step_times),
        "step_s": statistics.median(step_times),
        "step_sum": sum(step_times),
        "rollout_sum": sum(r["wall"] for r in measured),
        "sampling_sum": sum(r["sampling"] for r in measured),
        "calls": calls,
        "moves": sum(r["moves"] for r in measured),
        "tokens_per_move": sum(r["tokens"] for r in measured) / max(sum(r["moves"] for r in measured), 1),
        "valve": sum(r["valve"] for r in rollouts),
        "idle": sum(r["idle"] for r in rollouts),
        "ended": sum(r["ended"] for r in rollouts),
        "per_move": sum(step_times) / max(calls, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, repeats=1, warmup=1)
    p.add_argument("--steps", type=int, default=3, help="measured GRPO steps per side")
    p.add_argument("--max_wait_s", type=float, default=30.0, help="sampler_max_wait_s (the valve)")
    args = p.parse_args(argv)
    setup_torch(args.threads, args.seed)
    results = {}
    for side in ("ours", "cookbook"):
        start = time.perf_counter()
        results[side] = run_side(side, args.steps, args.warmup, args.seed, args.max_wait_s)
        results[side]["total_s"] = time.perf_counter() - start
    print(
        f"{'side':<10}{'steps':>6}{'step s (median)':>17}{'rollout s':>11}{'sampling s':>12}{'gen calls':>11}"
        f"{'moves':>7}{'prompt tok/move':>16}{'s per move':>12}{'valve':>7}{'quiet':>7}{'ended':>7}"
    )
    for side, r in results.items():
        print(
            f"{side:<10}{r['steps']:>6}{r['step_s']:>17.3f}{r['rollout_sum']:>11.3f}{r['sampling_sum']:>12.3f}"
            f"{r['calls']:>11}{r['moves']:>7}{r['tokens_per_move']:>16.0f}{r['per_move']:>12.3f}"
            f"{r['valve']:>7}{r['idle']:>7}{r['ended']:>7}"
        )
    ratio = results["cookbook"]["per_move"] / results["ours"]["per_move"]
    valves = results["cookbook"]["valve"] + results["ours"]["valve"]
    met = ratio <= 2.0 and valves == 0
    print(
        f"cookbook TextArena / our tic_tac_toe, time per move (step time / generation calls): {ratio:.2f}x "
        f"(target <= 2x); valve flushes {valves} (target 0): {'met' if met else 'NOT met'}. "
        "('quiet': calls sent because the loop was quiet; 'ended': players ended when their sibling stopped early; "
        "the cookbook's prompts are "
        f"{results['cookbook']['tokens_per_move'] / results['ours']['tokens_per_move']:.1f}x "
        "as long per move)"
    )
    if args.check and not met:
        sys.exit(1)
    return results


if __name__ == "__main__":
    main()
