"""Two-player self-play through EnvGRPOTrainer: tinker-cookbook's TextArena TicTacToe, unchanged, against our own
tic_tac_toe, on the tiny model. 4 games (8 player episodes) per step, group = one game (2 players), at most 8 tokens
per move, `sampler_max_wait_s` at the trainer default (30 s).

Three sides, run in interleaved rounds (ours, cookbook, ours_padded, then again), each a fresh trainer in this process:

* ``ours``: our ``tic_tac_toe`` self-play (one conversation per player: observations extend, one training row each);
* ``cookbook``: ``TwoPlayerTextArenaDatasetBuilder(TicTacToe-v0)`` through ``trl_envs.tinker.adapt``. Its
  observations repeat the whole game each move (~400 tokens after one move, ~680 after two), so each move is a
  fresh prompt and trains as its own row;
* ``ours_padded``: ``tic_tac_toe`` with a system message of filler text whose length is the difference of the two
  sides' prompt tokens per move (measured in the first round), so that both sides sample and train on prompts of
  the same length: the per-move comparison with the prompt length taken out.

Measured per side, over the measured steps (after ``--warmup`` steps): the trainer's logged ``step_time``; the
rollout's wall time, the part inside the sampler (``generate``), and the rest of the step (``step_time`` - rollout:
TRL's scoring, forward and backward); generation calls, their batch sizes, the moves made (player actions), prompt
tokens per move (the observation each action was sampled from) and completion tokens per move; the tokens of the
training rows (prompt + completion of every row TRL trains on); valve flushes (calls the 30 s ``max_wait_s`` valve
forced) and quiet-loop flushes (calls sent because every episode that had not asked was blocked on its sibling).

Time per move = step time / generation calls (one call per move number: every game's n-th move goes out together),
timed by wall clock (the trainer's ``step_time``) and by process CPU time per step (a callback; torch runs
single-threaded, so on a dedicated machine the two agree, and on a shared one CPU time is the steadier). Normalised:
sampler microseconds per prompt token sampled, training milliseconds per 1,000 trained tokens. Ratios are per
round, summarised by their median with every round's value.
Targets: cookbook per move <= 2x ours at the same prompt length (``ours_padded``, CPU time), and 0 valve flushes on
all sides; the unpadded ratio and the wall-clock ratios are printed too.

    python bench/multi_agent.py                 # 2 rounds x (1 warm-up step + 3 measured steps) per side
    python bench/multi_agent.py --steps 5 --repeats 3 --check

Writes ``bench/results/multi_agent.json`` (``--out``). Needs tinker-cookbook and textarena (docs/from_tinker.md).
With the tiny model's 1,024 positions and its unformatted moves, cookbook games end after one move per player (an
illegal move) or by the context budget (the player left waiting is then ended: stop reason ``sibling_ended``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401 - offline settings
from _common import add_common_args, setup_torch

from trl_envs.envs.tic_tac_toe.builders import TicTacToeSelfPlayDataset, TicTacToeSelfPlayGroupBuilder

SIDES = ("ours", "cookbook", "ours_padded")
FILLER = (
    "Tic-tac-toe is played on a grid of three rows and three columns. The two players take turns; each turn one "
    "player writes their mark in a free cell. Three marks of one player in a row, a column or a diagonal win the "
    "game, and a full grid without such a line is a draw. "
)


class PaddedSelfPlayGroup(TicTacToeSelfPlayGroupBuilder):
    """Our self-play group with ``preamble`` as a system message before each player's first board."""

    def __init__(self, *args, preamble: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.preamble = preamble

    async def make_envs(self):
        envs = await super().make_envs()
        for env in envs:
            player = env.message_env
            first = player.initial_messages

            async def padded(first=first):
                return [{"role": "system", "content": self.preamble}] + await first()

            player.initial_messages = padded
        return envs


class PaddedSelfPlayDataset(TicTacToeSelfPlayDataset):
    def __init__(self, *args, preamble: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.preamble = preamble

    def make_batch(self, index: int):
        return [
            PaddedSelfPlayGroup(
                self.renderer,
                self.group_size // 2,
                self.illegal_move_penalty,
                self.move_timeout,
                preamble=self.preamble,
            )
            for _ in range(self.batch_size)
        ]


def filler_text(tokenizer, num_tokens: int) -> str:
    """About ``num_tokens`` tokens of filler (the preamble of ``ours_padded``)."""
    if num_tokens <= 0:
        return ""
    unit = tokenizer.encode(FILLER, add_special_tokens=False)
    return tokenizer.decode((unit * (num_tokens // len(unit) + 1))[:num_tokens])


def run_side(side: str, steps: int, warmup: int, seed: int, max_wait_s: float, pad_tokens: int = 0) -> dict:
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback

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
    elif side == "ours_padded":
        envs = PaddedSelfPlayDataset(
            Renderer(tokenizer), 4, 2, total, preamble=filler_text(tokenizer, pad_tokens)
        )  # a dataset object the trainer takes as is (seed-independent: every game starts empty)
    else:
        from trl_envs.envs.tic_tac_toe import TicTacToeDatasetBuilder

        envs = TicTacToeDatasetBuilder(Renderer(tokenizer), batch_size=4, group_size=2, num_batches=total, seed=seed)
    rollouts: list[dict[str, float]] = []
    rows: list[dict[str, float]] = []
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
        step_cpu: list[float] = []

        class StepCPU(TrainerCallback):  # process CPU time of each optimizer step (steadier than wall when shared)
            def on_step_begin(self, *args, **kwargs):
                step_cpu.append(-time.process_time())

            def on_step_end(self, *args, **kwargs):
                step_cpu[-1] += time.process_time()

        trainer = EnvGRPOTrainer(path, config, envs, processing_class=tokenizer, callbacks=[StepCPU()])
        trainer.remove_callback(PrinterCallback)
        real_generation_batch = trainer.generation_batch  # every generation batch goes through it

        def recording_generation_batch(keys):
            cpu = time.process_time()
            batch = real_generation_batch(keys)
            cpu = time.process_time() - cpu  # the rollout and TRL's scoring of its rows
            r = trainer.last_rollout
            transitions = [tr for g in r.groups if g for t in g.trajectories for tr in t.transitions]
            rollouts.append(
                {
                    "wall": r.wall_seconds,
                    "cpu": cpu,
                    "sampling": r.sampler_seconds,
                    "calls": r.num_sampler_calls,
                    "batch_sizes": list(r.sampler_batch_sizes),
                    "valve": r.num_valve_flushes,
                    "idle": r.num_idle_flushes,
                    "ended": r.num_sibling_endings,
                    "moves": len(transitions),
                    "prompt_tokens": sum(len(tr.ob) for tr in transitions),
                    "completion_tokens": sum(len(tr.ac.tokens) for tr in transitions),
                }
            )
            lengths = (batch["prompt_mask"].sum(1) + batch["completion_mask"].sum(1)).tolist()
            rows.append({"rows": len(lengths), "tokens": sum(lengths), "padded": len(lengths) * max(lengths)})
            return batch

        trainer.generation_batch = recording_generation_batch
        trainer.train()
    step_times = [float(h["step_time"]) for h in trainer.state.log_history if "step_time" in h][warmup:]
    cpu_times = step_cpu[warmup:]
    measured, trained = rollouts[warmup:], rows[warmup:]
    n = max(len(step_times), 1)
    calls = sum(r["calls"] for r in measured)
    moves = max(sum(r["moves"] for r in measured), 1)
    rollout_sum, sampling_sum = sum(r["wall"] for r in measured), sum(r["sampling"] for r in measured)
    train_sum = sum(step_times) - rollout_sum
    trained_tokens = sum(r["tokens"] for r in trained)
    return {
        "steps": len(step_times),
        "step_times": step_times,
        "step_s": statistics.median(step_times),
        "step_sum": sum(step_times),
        "rollout_per_step": rollout_sum / n,
        "sampling_per_step": sampling_sum / n,
        "outside_sampler_per_step": (rollout_sum - sampling_sum) / n,
        "train_per_step": train_sum / n,
        "calls": calls,
        "batch_sizes": [b for r in measured for b in r["batch_sizes"]],
        "moves": moves,
        "prompt_tokens_per_move": sum(r["prompt_tokens"] for r in measured) / moves,
        "completion_tokens_per_move": sum(r["completion_tokens"] for r in measured) / moves,
        "train_rows_per_step": sum(r["rows"] for r in trained) / n,
        "train_tokens_per_step": trained_tokens / n,
        "sampler_us_per_prompt_token": 1e6 * sampling_sum / max(sum(r["prompt_tokens"] for r in measured), 1),
        "train_ms_per_1k_tokens": 1e6 * train_sum / max(trained_tokens, 1),
        "valve": sum(r["valve"] for r in rollouts),
        "idle": sum(r["idle"] for r in rollouts),
        "ended": sum(r["ended"] for r in rollouts),
        "per_move": sum(step_times) / max(calls, 1),
        "step_cpu": cpu_times,
        "generation_batch_cpu_per_step": sum(r["cpu"] for r in measured) / n,
        "per_move_cpu": sum(cpu_times) / max(calls, 1),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, repeats=2, warmup=1)
    p.add_argument("--steps", type=int, default=3, help="measured GRPO steps per side and round")
    p.add_argument("--max_wait_s", type=float, default=30.0, help="sampler_max_wait_s (the valve)")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "multi_agent.json"))
    args = p.parse_args(argv)
    setup_torch(args.threads, args.seed)
    print(
        f"multi-agent self-play, {args.repeats} interleaved round(s) of {args.warmup} warm-up + {args.steps} measured "
        f"steps per side, {args.threads} torch thread(s)",
        flush=True,
    )
    rounds: list[dict[str, dict]] = []
    pad_tokens = 0
    for i in range(args.repeats):
        results: dict[str, dict] = {}
        for side in SIDES:
            start = time.perf_counter()
            results[side] = run_side(side, args.steps, args.warmup, args.seed, args.max_wait_s, pad_tokens)
            results[side]["total_s"] = time.perf_counter() - start
            if i == 0 and side == "cookbook":
                pad_tokens = round(
                    results["cookbook"]["prompt_tokens_per_move"] - results["ours"]["prompt_tokens_per_move"]
                )
        rounds.append(results)
        show(i, results)

    def ratios(key: str, over: str) -> list[float]:
        return [r["cookbook"][key] / r[over][key] for r in rounds]

    valves = sum(r[s]["valve"] for r in rounds for s in SIDES)
    print()
    for clock, key in (("wall", "per_move"), ("CPU", "per_move_cpu")):
        for s in SIDES:
            values = [r[s][key] for r in rounds]
            print(f"{clock} time per move, {s:<12} {statistics.median(values):.3f} s {_common.spread(values)}")
    summary = {}
    for clock, key in (("wall", "per_move"), ("CPU", "per_move_cpu")):
        raw, padded = ratios(key, "ours"), ratios(key, "ours_padded")
        summary[clock] = {"ours": raw, "ours_padded": padded}
        print(
            f"{clock:<4} cookbook / ours per move:        {statistics.median(raw):5.2f}x "
            f"{_common.spread(raw, '{:.2f}')}"
        )
        print(
            f"{clock:<4} cookbook / ours_padded per move: {statistics.median(padded):5.2f}x "
            f"{_common.spread(padded, '{:.2f}')}"
        )
    generation_ratio = [
        (r["cookbook"]["generation_batch_cpu_per_step"] / r["cookbook"]["calls"])
        / (r["ours_padded"]["generation_batch_cpu_per_step"] / r["ours_padded"]["calls"])
        for r in rounds
    ]
    print(
        "CPU  cookbook / ours_padded generation batch (rollout + TRL's scoring) per generate call: "
        f"{statistics.median(generation_ratio):.2f}x {_common.spread(generation_ratio, '{:.2f}')}"
    )
    first = {s: rounds[0][s]["prompt_tokens_per_move"] for s in SIDES}
    print(
        f"(the cookbook's prompts are {first['cookbook'] / first['ours']:.1f}x"
        f" as long per move as ours; ours_padded has {pad_tokens} tokens of filler per prompt: "
        f"{first['ours_padded']:.0f} vs {first['cookbook']:.0f})"
    )
    cpu_padded, cpu_raw = statistics.median(summary["CPU"]["ours_padded"]), statistics.median(summary["CPU"]["ours"])
    targets = _common.Targets()
    targets.add(
        "cookbook TextArena per move <= 2x our tic_tac_toe at the same prompt length (ours_padded; CPU "
        f"{cpu_padded:.2f}x, wall {statistics.median(summary['wall']['ours_padded']):.2f}x)",
        cpu_padded <= 2.0,
    )
    targets.add(
        f"cookbook TextArena per move <= 2x our tic_tac_toe as is (CPU {cpu_raw:.2f}x, wall "
        f"{statistics.median(summary['wall']['ours']):.2f}x)",
        cpu_raw <= 2.0,
    )
    targets.add(f"0 valve flushes on every side ({valves})", valves == 0)
    record = {
        "command": "python bench/multi_agent.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "pad_tokens": pad_tokens,
        "rounds": rounds,
        "ratios_per_move": summary,
        "ratio_generation_batch_cpu_per_call_padded": generation_ratio,
        "targets": dict(targets.results),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(f"written: {args.out}")
    targets.finish(args.check)
    return record


def show(index: int, results: dict[str, dict]) -> None:
    print(
        f"round {index + 1}\n{'side':<12}{'steps':>6}{'step s':>8}{'step CPU':>9}{'rollout':>9}{'sampler':>9}"
        f"{'train':>8}"
        f"{'calls':>7}{'moves':>7}{'batch':>7}{'prompt/mv':>10}{'compl/mv':>9}{'rows':>6}{'train tok':>10}"
        f"{'us/prompt tok':>14}{'ms/1k train tok':>16}{'s/move':>8}{'valve':>6}{'quiet':>6}{'ended':>6}"
    )
    for side, r in results.items():
        print(
            f"{side:<12}{r['steps']:>6}{r['step_s']:>8.3f}{statistics.median(r['step_cpu']):>9.3f}"
            f"{r['rollout_per_step']:>9.3f}{r['sampling_per_step']:>9.3f}"
            f"{r['train_per_step']:>8.3f}{r['calls']:>7}{r['moves']:>7}"
            f"{statistics.mean(r['batch_sizes']) if r['batch_sizes'] else 0:>7.1f}"
            f"{r['prompt_tokens_per_move']:>10.0f}{r['completion_tokens_per_move']:>9.1f}"
            f"{r['train_rows_per_step']:>6.1f}{r['train_tokens_per_step']:>10.0f}"
            f"{r['sampler_us_per_prompt_token']:>14.1f}{r['train_ms_per_1k_tokens']:>16.1f}{r['per_move']:>8.3f}"
            f"{r['valve']:>6}{r['idle']:>6}{r['ended']:>6}",
            flush=True,
        )
    print(
        "(per step, seconds: step = the trainer's step_time (median), step CPU = process CPU time (median); "
        "rollout, of which sampler; train = step - rollout. "
        "batch = mean requests per generation call; rows / train tok = training rows and their tokens per step)"
    )


if __name__ == "__main__":
    main()
