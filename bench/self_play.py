"""Self-play tic-tac-toe: win / draw / loss rate against a random opponent before and after GRPO self-play training.

The tiny model plays the held-out games of ``TicTacToeVsOpponentDataset`` (half as X, half as O; sampling at
temperature 1), then trains N steps of EnvGRPOTrainer on self-play groups (group of 8 = 4 games x 2 players,
zero-sum outcome as group reward, illegal moves lose), then plays the same games again. Also prints the sampler
calls and valve flushes of the self-play rollouts (parked players must not stall the batch: 0 flushes).

    python bench/self_play.py                          # 100 steps, 128 evaluation games vs random
    python bench/self_play.py --steps 300 --opponents random perfect
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
from transformers import AutoTokenizer, PrinterCallback  # noqa: E402

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, HFSampler, Renderer, RolloutBudget, run_rollout_batch  # noqa: E402
from trl_envs.envs.tic_tac_toe import TicTacToeDatasetBuilder, TicTacToeVsOpponentDataset  # noqa: E402
from trl_envs.tiny_model import build_tiny_model  # noqa: E402

BUDGET = RolloutBudget(max_turns=5, max_tokens_per_turn=4)


def play(sampler, renderer, opponent: str, games: int, seed: int) -> dict[str, float]:
    """Rates over ``games`` games against ``opponent`` (8 games per group, marks alternating by group)."""
    dataset = TicTacToeVsOpponentDataset(
        renderer, batch_size=games // 8, group_size=8, num_batches=1, opponent=opponent, seed=seed
    )
    torch.manual_seed(seed)
    result = run_rollout_batch(dataset.get_batch(0), sampler, BUDGET)
    finals = [t.transitions[-1].metrics for g in result.groups for t in g.trajectories]
    n = len(finals)
    return {k: sum(f.get(k, 0.0) for f in finals) / n for k in ("win", "draw", "loss", "illegal")} | {"games": n}


def show(label: str, rates: dict[str, float]) -> str:
    return (
        f"{label:<28} win {rates['win']:.3f}  draw {rates['draw']:.3f}  loss {rates['loss']:.3f}  "
        f"(illegal moves lost {rates['illegal']:.3f})  over {rates['games']} games"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--games", type=int, default=128, help="evaluation games per opponent (a multiple of 8)")
    p.add_argument("--opponents", nargs="+", default=["random"], choices=["random", "perfect"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--groups_per_step", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)

    model_path = build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    renderer = Renderer(tokenizer)
    builder = TicTacToeDatasetBuilder(
        renderer, batch_size=args.groups_per_step, group_size=8, num_batches=args.steps * 2, seed=args.seed
    )
    with tempfile.TemporaryDirectory() as out:
        config = EnvGRPOConfig(
            output_dir=out,
            use_cpu=True,
            bf16=False,
            report_to="none",
            gradient_checkpointing=False,
            disable_tqdm=True,
            seed=args.seed,
            num_generations=8,
            per_device_train_batch_size=8 * args.groups_per_step,
            max_steps=args.steps,
            learning_rate=args.lr,
            beta=0.0,
            max_completion_length=4,
            max_turns=5,
            logging_steps=1,
            save_strategy="no",
        )
        trainer = EnvGRPOTrainer(model_path, config, builder, processing_class=tokenizer)
        trainer.remove_callback(PrinterCallback)  # the summary below is the output
        sampler = HFSampler(trainer.model, tokenizer, temperature=1.0)
        trainer.model.eval()
        before = {o: play(sampler, renderer, o, args.games, 1000 + args.seed) for o in args.opponents}
        calls, flushes, rollouts = [], [], 0
        real_generation_batch = trainer.generation_batch  # every generation batch goes through it

        def counting_generation_batch(keys):
            nonlocal rollouts
            batch = real_generation_batch(keys)
            calls.append(trainer.last_rollout.num_sampler_calls)
            flushes.append(trainer.last_rollout.num_valve_flushes)
            rollouts += 1
            return batch

        trainer.generation_batch = counting_generation_batch
        start = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - start
        trainer.model.eval()
        after = {o: play(sampler, renderer, o, args.games, 1000 + args.seed) for o in args.opponents}
    for o in args.opponents:
        print(show(f"vs {o}, before", before[o]))
        print(show(f"vs {o}, after {args.steps} steps", after[o]))
    logged = [h for h in trainer.state.log_history if "env/all/illegal" in h]
    tenth = max(1, len(logged) // 10)
    for name, part in (("first", logged[:tenth]), ("last", logged[-tenth:])):
        mean = {k: sum(h[k] for h in part) / len(part) for k in ("env/all/illegal", "env/all/moves")}
        print(
            f"self-play, {name} {len(part)} steps: illegal-move rate per episode {mean['env/all/illegal']:.3f}, "
            f"legal moves per episode {mean['env/all/moves']:.2f}"
        )
    print(
        f"training: {train_s:.1f} s for {args.steps} steps; self-play rollouts: {rollouts}, sampler calls per "
        f"rollout {min(calls)}-{max(calls)} (a game has at most 9 moves), valve flushes {sum(flushes)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
