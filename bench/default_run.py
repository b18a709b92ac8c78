"""The README's default run, timed: ``accelerate launch scripts/train_grpo.py`` with no arguments.

    python bench/default_run.py            # runs it in a scratch folder (~2.5-7 min on 2 CPU cores), writes the JSON
    python bench/default_run.py --summarize OUTPUT_DIR --wall_seconds S   # a run already made, its wall time given

Timed: the whole command, wall clock (``time.monotonic`` around the child process), on the demo model that ships with
the package. Read from the run's files: ``train_runtime`` (``train_results.json``) and the model card's held-out
evaluation before and after training (``eval_results.json``: mean reward, pass@1, pass@8); from the shipped model's
``build.json``: the sha256 of its weights, so a result names the weights it was measured on. Writes
``bench/results/default_run.json``, where the README takes its numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def readme_summary(result: dict) -> str:
    """The README's sentence about a fresh default run, from its JSON summary."""
    before, after = result["held_out_before"], result["held_out_after"]
    load = result.get("load_average_at_start")
    machine = (
        f"{result['machine']} (load average {load:.1f} at the start)"
        if load is not None
        else f"{result['machine']} shared with other jobs"
    )
    return (
        f"{result['wall_seconds']:.0f} s wall clock on {machine}, "
        f"{result['train_runtime_seconds']:.0f} s "
        f"of it training; held-out pass@1 {before['pass@1']:.3f} → {after['pass@1']:.3f}, pass@8 "
        f"{before['pass@8']:.3f} → {after['pass@8']:.3f}"
    )


RESULT = REPO / "bench" / "results" / "default_run.json"


def summarize(output_dir: Path, wall_seconds: float, command: str) -> dict:
    """The JSON summary of a finished default run in ``output_dir``."""
    sys.path.insert(0, str(REPO))
    from trl_envs.tiny_model import DEMO_MODEL_NAME, build_record

    evaluation = json.loads((output_dir / "eval_results.json").read_text())
    train = json.loads((output_dir / "train_results.json").read_text())
    build = build_record(DEMO_MODEL_NAME)

    def held_out(name: str) -> dict:
        r = evaluation[name]
        return {
            "mean_reward": round(r["mean_reward"], 3),
            **{f"pass@{k}": round(v, 3) for k, v in r["pass_at_k"].items()},
        }

    return {
        "command": command,
        "wall_seconds": round(wall_seconds, 1),
        "train_runtime_seconds": round(train["train_runtime"], 1),
        "demo_model": DEMO_MODEL_NAME,
        "demo_model_sha256": build["sha256"]["model.safetensors"],
        "held_out_before": held_out("before"),
        "held_out_after": held_out("after"),
        "card_eval": evaluation["settings"],
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--summarize", default=None, help="a finished default run's output_dir (no new run)")
    parser.add_argument("--wall_seconds", type=float, default=None, help="its measured wall time (with --summarize)")
    parser.add_argument("--output", default=str(RESULT))
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the run (default: as found)")
    args = parser.parse_args(argv)
    command = "accelerate launch scripts/train_grpo.py"
    if args.summarize:
        if args.wall_seconds is None:
            parser.error("--summarize needs --wall_seconds (the run's measured wall time)")
        output_dir, wall = Path(args.summarize), args.wall_seconds
    else:
        work = Path(tempfile.mkdtemp(prefix="default_run-"))
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if args.threads is not None:
            env["OMP_NUM_THREADS"] = str(args.threads)
        load_at_start = os.getloadavg()[0]
        start = time.monotonic()
        subprocess.run(["accelerate", "launch", str(REPO / "scripts" / "train_grpo.py")], cwd=work, env=env, check=True)
        wall = time.monotonic() - start
        output_dir = work / "outputs" / "grpo-arithmetic"
    result = summarize(output_dir, wall, command)
    if not args.summarize:
        result["load_average_at_start"] = round(load_at_start, 2)
        result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        result["omp_num_threads"] = env.get("OMP_NUM_THREADS")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {args.output}")
    print(f"README: {readme_summary(result)}")
    return result


if __name__ == "__main__":
    main()
