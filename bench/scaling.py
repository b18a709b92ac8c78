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
Process start-up and model loading are excluded; each launch's wall time is printed for reference. Because wall
time on a shared machine mostly measures the neighbours, the bench also reports CPU time (``time.process_time`` per
process over the same steps): CPU ms per episode summed over processes (2 processes / 1 process = the overhead of going
distributed) and a CPU-bound ratio (episodes per second of the busiest process's CPU time, as if each process had a
core of its own).

Both runs use ``--threads`` torch threads per process (default 1; OMP_NUM_THREADS is set to match), so on a 2-core box
the 1-process run leaves a core idle; ``--single_process_threads 2`` gives the single process both cores instead.

The per-rank work is done by tests/distributed_worker.py (the worker the multi-process tests launch), which records
step times. Run: ``python bench/scaling.py [--total_batch 256 --steps 4 --repeats 1]``; prints the ratio
``episodes/s (2 processes) / episodes/s (1 process)``. ``--check`` exits 1 when the ratio is below ``--min_ratio``.

Reading it: the tiny model is latency-bound. A rollout is ~6 sequential turns of a few tokens each, and one
``generate`` step of a 64-wide, 2-layer model costs about the same for 16 rows as for 32, so with small batches
(``--total_batch 32``) halving the per-process batch barely shortens a step and the ratio is ~1 or below (the second
process only adds gathers and gradient all-reduces). Data parallelism pays once per-process compute grows with the
batch (the default 256), and of course on real models. On a shared machine the numbers move with the neighbours'
load: compare runs made at the same time, and look at ``uptime`` first.
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
    parser.add_argument("--total_batch", type=int, default=256, help="episodes per step over all processes")
    parser.add_argument("--num_generations", type=int, default=4, help="group size")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup_steps", type=int, default=1, help="first steps left out of the measurement")
    parser.add_argument("--env", default="guess_number", choices=["guess_number", "arithmetic"])
    parser.add_argument("--max_completion_length", type=int, default=6, help="tokens per turn")
    parser.add_argument("--max_turns", type=int, default=6)
    parser.add_argument(
        "--single_process_threads",
        type=int,
        default=None,
        help="torch threads of the 1-process run (default: --threads)",
    )
    parser.add_argument("--min_ratio", type=float, default=1.2, help="target for --check")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per launch")
    _common.add_common_args(parser, repeats=1, warmup=0)
    return parser.parse_args(argv)


def run_launch(config: str, nproc: int, threads: int, args, model_path: str, launch_args=()) -> dict:
    if args.total_batch % (nproc * args.num_generations):
        raise SystemExit(
            f"--total_batch {args.total_batch} must be a multiple of processes x num_generations "
            f"({nproc} x {args.num_generations})"
        )
    with tempfile.TemporaryDirectory(prefix="trl_envs_scaling_") as out:
        cmd = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            str(REPO / "accelerate_configs" / config),
            *launch_args,
            str(WORKER),
            "--out",
            out,
            "--scenarios",
            f"{args.env}:group",
            "--steps",
            str(args.steps),
            "--num_generations",
            str(args.num_generations),
            "--per_device_batch",
            str(args.total_batch // nproc),
            "--max_completion_length",
            str(args.max_completion_length),
            "--max_turns",
            str(args.max_turns),
            "--threads",
            str(threads),
            "--seed",
            str(args.seed),
            "--model_path",
            model_path,
        ]
        env = dict(
            os.environ,
            OMP_NUM_THREADS=str(threads),
            MKL_NUM_THREADS=str(threads),
            HF_HUB_OFFLINE="1",
            TRL_EXPERIMENTAL_SILENCE="1",
            TOKENIZERS_PARALLELISM="false",
        )
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.timeout)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
            raise SystemExit(f"{config}: launch failed with exit code {proc.returncode}")
        ranks = [json.loads((Path(out) / f"rank{r}.json").read_text()) for r in range(nproc)]
    per_rank = [r["scenarios"][f"{args.env}_group"] for r in ranks]
    sc = per_rank[0]
    if sc["world_size"] != nproc:
        raise SystemExit(f"{config}: expected {nproc} processes, the run had {sc['world_size']}")
    measured = sc["step_seconds"][args.warmup_steps :]
    if not measured:
        raise SystemExit("no measured steps: raise --steps above --warmup_steps")
    episodes = args.total_batch * len(measured)
    cpu = [sum(s["step_cpu_seconds"][args.warmup_steps :]) for s in per_rank]  # per process, measured steps
    return {
        "episodes_per_s": episodes / sum(measured),
        "step_s": statistics.median(measured),
        "wall_s": wall,
        "steps": sc["step_seconds"],
        "distributed_type": sc["distributed_type"],
        "cpu_ms_per_episode": 1000 * sum(cpu) / episodes,
        # if every process had a core of its own and never waited: wall = the busiest process's CPU time
        "episodes_per_cpu_bound_s": episodes / max(cpu),
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    model_path, _, _ = _common.load_tiny_model()
    single_threads = args.single_process_threads or args.threads
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(
        f"{args.env}: total batch {args.total_batch} episodes/step ({args.total_batch // args.num_generations} groups "
        f"of {args.num_generations}), {args.steps} steps ({args.warmup_steps} warm-up), max_turns={args.max_turns}, "
        f"max_tokens/turn={args.max_completion_length}; threads/process: 1 proc {single_threads}, 2 procs "
        f"{args.threads}; CPUs visible: {os.cpu_count()}"
    )
    ones, twos, ratios, cpu_ratios, overheads = [], [], [], [], []
    for rep in range(args.warmup + args.repeats):
        # a 1-process and a 2-process launch back to back (alternating which goes first), compared pairwise: on a
        # shared machine the neighbours' load drifts more between pairs than within one
        order = (1, 2) if rep % 2 == 0 else (2, 1)
        runs = {}
        for n in order:
            if n == 1:
                runs[1] = run_launch(
                    "single_gpu.yaml", 1, single_threads, args, model_path, ["--mixed_precision", "no"]
                )
            else:
                runs[2] = run_launch("cpu_2proc.yaml", 2, args.threads, args, model_path)
        kind = "warmup" if rep < args.warmup else "run"
        for n in order:
            r = runs[n]
            print(
                f"  {kind} {rep}: {n} process{'es' if n > 1 else ''} ({r['distributed_type']}): "
                f"{r['episodes_per_s']:.2f} episodes/s, median step {r['step_s']:.2f}s, "
                f"launch wall {r['wall_s']:.1f}s, "
                f"step times {[round(s, 2) for s in r['steps']]}; CPU {r['cpu_ms_per_episode']:.1f} ms/episode "
                f"(all processes), {r['episodes_per_cpu_bound_s']:.1f} episodes per busiest-process CPU second",
                flush=True,
            )
        if rep >= args.warmup:
            ones.append(runs[1]["episodes_per_s"])
            twos.append(runs[2]["episodes_per_s"])
            ratios.append(runs[2]["episodes_per_s"] / runs[1]["episodes_per_s"])
            cpu_ratios.append(runs[2]["episodes_per_cpu_bound_s"] / runs[1]["episodes_per_cpu_bound_s"])
            overheads.append(runs[2]["cpu_ms_per_episode"] / runs[1]["cpu_ms_per_episode"])
    e1, e2 = _common.median(ones), _common.median(twos)
    ratio = _common.median(ratios)
    print()
    print(f"1 process:   {e1:.2f} episodes/s {_common.spread(ones, '{:.2f}')}")
    print(f"2 processes: {e2:.2f} episodes/s {_common.spread(twos, '{:.2f}')}")
    print(
        f"ratio (2 processes / 1 process): {ratio:.2f}   (median of back-to-back pairs) "
        f"{_common.spread(ratios, '{:.2f}')}"
    )
    print(
        f"CPU-bound ratio (each process on a core of its own, from CPU time; less sensitive to the neighbours): "
        f"{_common.median(cpu_ratios):.2f} {_common.spread(cpu_ratios, '{:.2f}')}"
    )
    print(
        f"CPU time per episode, 2 processes / 1 process (the cost of going distributed): "
        f"{_common.median(overheads):.2f} {_common.spread(overheads, '{:.2f}')}"
    )
    targets = _common.Targets()
    targets.add(f"2-process / 1-process throughput >= {args.min_ratio:.2f} (got {ratio:.2f})", ratio >= args.min_ratio)
    targets.finish(args.check)


if __name__ == "__main__":
    main()
