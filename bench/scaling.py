"""Data-parallel scaling on CPU: rollout + train throughput (episodes/s) with 1 and 2 processes, same total batch.

What it measures: ``EnvGRPOTrainer`` training the offline tiny chat model on ``guess_number`` (multi-turn) for
``--steps`` optimizer steps, each step rolling out and training on ``--total_batch`` episodes (``--total_batch /
--num_generations`` env groups):

* 1 process: ``accelerate launch --config_file accelerate_configs/single_gpu.yaml --mixed_precision no``, all groups
  on one rank (``per_device_train_batch_size = total_batch``);
* 2 processes: ``accelerate launch --config_file accelerate_configs/cpu_2proc.yaml`` (gloo), half of the groups on
  each rank, generation in lock-step, gradients all-reduced.

Throughput = episodes / seconds over the steps after the first ``--warmup_steps`` (which carry one-time costs), timed
on rank 0 from the end of one optimizer step to the end of the next (rollout, scoring, the training step, logging).
Process start-up and model loading are excluded; each launch's wall time is printed for reference.

Both runs use ``--threads`` torch threads per process (default 1; OMP_NUM_THREADS is set to match), so on a 2-core box
the 1-process run leaves a core idle; ``--single_process_threads 2`` gives the single process both cores instead.

The per-rank work is done by tests/distributed_worker.py (the worker the multi-process tests launch), which records
step times. Run: ``python bench/scaling.py [--total_batch 32 --steps 6 --repeats 1]``; prints the ratio
``episodes/s (2 processes) / episodes/s (1 process)``. ``--check`` exits 1 when the ratio is below ``--min_ratio``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "tests" / "distributed_worker.py"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--total_batch", type=int, default=32, help="episodes per step over all processes")
    parser.add_argument("--num_generations", type=int, default=4, help="group size")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup_steps", type=int, default=1, help="first steps left out of the measurement")
    parser.add_argument("--env", default="guess_number", choices=["guess_number", "arithmetic"])
    parser.add_argument("--max_completion_length", type=int, default=6, help="tokens per turn")
    parser.add_argument("--max_turns", type=int, default=6)
    parser.add_argument("--single_process_threads", type=int, default=None,
                        help="torch threads of the 1-process run (default: --threads)")
    parser.add_argument("--min_ratio", type=float, default=1.2, help="target for --check")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per launch")
    _common.add_common_args(parser, repeats=1, warmup=0)
    return parser.parse_args(argv)


def run_launch(config: str, nproc: int, threads: int, args, model_path: str, launch_args=()) -> dict:
    if args.total_batch % (nproc * args.num_generations):
        raise SystemExit(f"--total_batch {args.total_batch} must be a multiple of processes x num_generations "
                         f"({nproc} x {args.num_generations})")
    with tempfile.TemporaryDirectory(prefix="trl_envs_scaling_") as out:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(REPO / "accelerate_configs" / config), *launch_args, str(WORKER), "--out", out,
               "--scenarios", f"{args.env}:group", "--steps", str(args.steps),
               "--num_generations", str(args.num_generations), "--per_device_batch", str(args.total_batch // nproc),
               "--max_completion_length", str(args.max_completion_length), "--max_turns", str(args.max_turns),
               "--threads", str(threads), "--seed", str(args.seed), "--model_path", model_path]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1",
                   TRL_EXPERIMENTAL_SILENCE="1", TOKENIZERS_PARALLELISM="false")
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.timeout)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
            raise SystemExit(f"{config}: launch failed with exit code {proc.returncode}")
        rank0 = json.loads((Path(out) / "rank0.json").read_text())
    sc = rank0["scenarios"][f"{args.env}_group"]
    if sc["world_size"] != nproc:
        raise SystemExit(f"{config}: expected {nproc} processes, the run had {sc['world_size']}")
    measured = sc["step_seconds"][args.warmup_steps:]
    if not measured:
        raise SystemExit("no measured steps: raise --steps above --warmup_steps")
    episodes = args.total_batch * len(measured)
    return {"episodes_per_s": episodes / sum(measured), "step_s": statistics.median(measured),
            "wall_s": wall, "steps": sc["step_seconds"], "distributed_type": sc["distributed_type"]}


def main(argv=None) -> None:
    args = parse_args(argv)
    model_path, _, _ = _common.load_tiny_model()
    single_threads = args.single_process_threads or args.threads
    print(f"{args.env}: total batch {args.total_batch} episodes/step ({args.total_batch // args.num_generations} groups "
          f"of {args.num_generations}), {args.steps} steps ({args.warmup_steps} warm-up), max_turns={args.max_turns}, "
          f"max_tokens/turn={args.max_completion_length}; threads/process: 1 proc {single_threads}, 2 procs "
          f"{args.threads}; CPUs visible: {os.cpu_count()}")
    ones, twos = [], []
    for rep in range(args.warmup + args.repeats):
        one = run_launch("single_gpu.yaml", 1, single_threads, args, model_path, ["--mixed_precision", "no"])
        two = run_launch("cpu_2proc.yaml", 2, args.threads, args, model_path)
        kind = "warmup" if rep < args.warmup else "run"
        for n, r in ((1, one), (2, two)):
            print(f"  {kind} {rep}: {n} process{'es' if n > 1 else ''} ({r['distributed_type']}): "
                  f"{r['episodes_per_s']:.2f} episodes/s, median step {r['step_s']:.2f}s, launch wall {r['wall_s']:.1f}s, "
                  f"step times {[round(s, 2) for s in r['steps']]}")
        if rep >= args.warmup:
            ones.append(one["episodes_per_s"])
            twos.append(two["episodes_per_s"])
    e1, e2 = _common.median(ones), _common.median(twos)
    ratio = e2 / e1
    print()
    print(f"1 process:   {e1:.2f} episodes/s {_common.spread(ones, '{:.2f}')}")
    print(f"2 processes: {e2:.2f} episodes/s {_common.spread(twos, '{:.2f}')}")
    print(f"ratio (2 processes / 1 process): {ratio:.2f}")
    targets = _common.Targets()
    targets.add(f"2-process / 1-process throughput >= {args.min_ratio:.2f} (got {ratio:.2f})", ratio >= args.min_ratio)
    targets.finish(args.check)


if __name__ == "__main__":
    main()
