"""How fast do the in-process samplers make a real-size GRPO step on one GPU? (``EnvGRPOConfig.sampler_backend``)

For each model (full-size, randomly initialised Qwen2.5-0.5B and 1.5B architectures built locally from their published
configs, every layer, with the demo tokenizer: no weights can be downloaded), each recipe (the 0.5B arithmetic recipe,
single turn, and the guess_number recipe, multi-turn, whose env steps wait ``--env_wait_ms`` as a tool or env server
would), each sampler backend (``generate``, ``static_cache``, ``continuous_batching``) and each ``max_staleness``
(0: sync, 1: rollouts overlap training), ``EnvGRPOTrainer`` trains ``--steps`` steps with the recipe's own settings
(batch, budgets, bf16, gradient checkpointing) on the GPU.

Timed and how:
* step time: wall time between ``on_step_end`` callbacks (the first step, with its compilation and warm-up, is reported
  apart; "steady" is the median of the later steps);
* generation tokens/s: tokens sampled in a step's rollout / the time the rollout spent in its sampler (the rollout
  engine's ``sampler_seconds``; with continuous batching, the time with at least one request in flight), summed over
  the steady steps;
* peak memory: ``torch.cuda.max_memory_allocated`` of the training process, and the most device memory in use by all
  processes (``torch.cuda.mem_get_info``, read at every step end: the async sampler process included). On a CPU: the
  process's peak resident memory.

Headline, from measured numbers only: generation tokens/s of each backend over ``generate``'s, and sync step time over
async's; the targets (0.5B arithmetic step <= 3.0 s; generation tokens/s >= 3x generate; async k=1 >= 1.3x sync on the
multi-turn recipe with env wait) are printed MET / NOT MET on a GPU, and not judged on a ``--cpu`` smoke run. Results
go to ``--out`` (JSON, with the device's name and this exact command), rewritten after every run. A run that fails
is reported and the others go on; ``--budget_min`` (2.5 on a GPU; 0 for the whole matrix) stops starting runs, which
go in order of the targets they serve.

    python bench/gpu_rollouts.py                       # one GPU, the first runs that fit in 2.5 minutes
    python bench/gpu_rollouts.py --budget_min 0        # one GPU: all models, recipes, backends, sync and async
    python bench/gpu_rollouts.py --cpu                 # smoke run on the CPU, tiny sizes: ~1 min of CPU time
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import resource
import shlex
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import _common  # noqa: F401 - offline settings first
import torch  # noqa: E402
import yaml  # noqa: E402
from transformers import AutoTokenizer, PrinterCallback, TrainerCallback  # noqa: E402

from trl_envs import Env, EnvGroupBuilder, EnvGRPOConfig, EnvGRPOTrainer, Renderer, RLDataset  # noqa: E402
from trl_envs.core.types import RLDatasetBuilder  # noqa: E402
from trl_envs.registry.names import make_env_dataset  # noqa: E402
from trl_envs.rollout.event_loop import run_sync  # noqa: E402
from trl_envs.samplers.choice import SAMPLER_BACKENDS  # noqa: E402
from trl_envs.tiny_model import build_tiny_model  # noqa: E402

warnings.filterwarnings("ignore", message=".*teaches nothing")  # a random model: the health watchdog's point, not ours
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
MODELS = ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct")
RECIPES = {"arithmetic": "single turn", "guess_number": "multi-turn"}
MULTI_TURN = "guess_number"
TARGET_STEP_S, TARGET_GEN_SPEEDUP, TARGET_ASYNC_SPEEDUP = 3.0, 3.0, 1.3
CPU_SHRINK = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
)
CPU_OVERRIDES = dict(
    use_cpu=True,
    bf16=False,
    gradient_checkpointing=False,
    num_generations=2,
    per_device_train_batch_size=4,
    gradient_accumulation_steps=1,
    max_completion_length=8,
    max_turns=3,
)
RECIPE_FIELDS_DROPPED = ("model_name_or_path", "env_name", "env_kwargs", "output_dir", "save_strategy", "save_steps")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="results JSON (default: bench/results/gpu_rollouts_<device>.json)")
    parser.add_argument("--cpu", action="store_true", help="smoke run on the CPU: tiny sizes, 2 steps")
    parser.add_argument("--models", nargs="+", default=None, help=f"architectures (default: {' '.join(MODELS)})")
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--backends", nargs="+", default=list(SAMPLER_BACKENDS), choices=list(SAMPLER_BACKENDS))
    parser.add_argument("--staleness", nargs="+", type=int, default=[0, 1], help="max_staleness values")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps per run (default 4; --cpu: 2)")
    parser.add_argument("--env_wait_ms", type=float, default=None, help="multi-turn env wait per step (default 200)")
    parser.add_argument("--model_cache", help="where the random models are built (default: a temporary folder)")
    parser.add_argument(
        "--budget_min",
        type=float,
        default=None,
        help="start no new run after this many minutes (default: 2.5 on a GPU, so that the whole bench fits a "
        "5-minute check stage; 0: no limit, the whole matrix; none with --cpu); runs go in order of the targets "
        "they serve (0.5B arithmetic sync, then the multi-turn recipe sync and async, then the rest); the runs "
        "left out are listed in the results",
    )
    args = parser.parse_args(argv)
    args.models = args.models or (MODELS[:1] if args.cpu else list(MODELS))
    args.steps = args.steps or (2 if args.cpu else 4)
    args.env_wait_ms = args.env_wait_ms if args.env_wait_ms is not None else (20.0 if args.cpu else 200.0)
    if args.budget_min is None and not args.cpu:
        args.budget_min = 2.5
    if args.steps < 2:
        parser.error("--steps must be >= 2 (the first step is reported apart from the steady ones)")
    return args


# -- models, recipes, envs -----------------------------------------------------------------------------------------


def build_random_model(model_id: str, tokenizer, folder: Path, *, cpu: bool) -> str:
    """A randomly initialised model of ``model_id``'s published architecture (all layers; ``cpu``: shrunk) saved with
    the demo tokenizer under ``folder``; built once per folder."""
    from recipe_estimates import ARCHITECTURES  # bench/ is on the path (python bench/gpu_rollouts.py)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    arch = dict(ARCHITECTURES[model_id])
    if cpu:
        arch.update(CPU_SHRINK, vocab_size=len(tokenizer))
    path = folder / (re.sub(r"\W+", "-", model_id.split("/")[-1].lower()) + ("-cpu" if cpu else ""))
    if (path / "config.json").exists():
        return str(path)
    config = Qwen2Config(
        **arch,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        use_sliding_window=False,
    )
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() and not cpu else "cpu"):  # initialising on a GPU is fast
        model = Qwen2ForCausalLM(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def recipe(name: str, model_id: str) -> dict[str, Any]:
    size = model_id.split("-")[1].lower()  # "0.5B" -> "0.5b"
    path = REPO / "scripts" / "configs" / f"qwen2.5-{size}" / f"{name}.yaml"
    return yaml.safe_load(path.read_text()) | {"_path": str(path.relative_to(REPO))}


class WaitingEnv(Env):
    """``env`` whose every step first awaits ``wait_s`` (a tool / env-server call)."""

    def __init__(self, env: Env, wait_s: float):
        self.env, self.wait_s = env, wait_s

    async def initial_observation(self):
        return await self.env.initial_observation()

    async def step(self, action, **kwargs):
        await asyncio.sleep(self.wait_s)
        return await self.env.step(action, **kwargs)


class WaitingGroup(EnvGroupBuilder):
    def __init__(self, builder: EnvGroupBuilder, wait_s: float):
        self.builder, self.wait_s = builder, wait_s

    async def make_envs(self):
        return [WaitingEnv(e, self.wait_s) for e in await self.builder.make_envs()]

    async def compute_group_rewards(self, trajectory_group, env_group):
        return await self.builder.compute_group_rewards(trajectory_group, [e.env for e in env_group])

    async def cleanup(self):
        await self.builder.cleanup()

    def logging_tags(self):
        return self.builder.logging_tags()


class WaitingDataset(RLDataset):
    def __init__(self, dataset: RLDataset, wait_s: float):
        self.dataset, self.wait_s = dataset, wait_s

    def get_batch(self, index: int):
        return [WaitingGroup(b, self.wait_s) for b in self.dataset.get_batch(index)]

    def __len__(self) -> int:
        return len(self.dataset)


def env_dataset(spec: dict, renderer: Renderer, group_size: int, wait_s: float) -> RLDataset:
    envs = make_env_dataset(spec["env_name"], renderer, group_size=group_size, **(spec.get("env_kwargs") or {}))
    if isinstance(envs, RLDatasetBuilder):
        envs, _ = run_sync(envs)
    return WaitingDataset(envs, wait_s) if wait_s > 0 else envs


# -- one run -------------------------------------------------------------------------------------------------------


class StepClock(TrainerCallback):
    """Per optimizer step: its end time, the tokens its rollout sampled and the rollout's sampler time; the most
    device memory in use."""

    def __init__(self, trainer_ref: list):
        self.trainer_ref = trainer_ref
        self.start = time.perf_counter()
        self.ends: list[float] = []
        self.tokens: list[int] = []
        self.sampler_s: list[float] = []
        self.device_used = 0

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())
        rollout = self.trainer_ref[0].last_rollout
        self.tokens.append(
            sum(len(t.ac.tokens) for g in rollout.groups for traj in g.trajectories for t in traj.transitions)
        )
        self.sampler_s.append(rollout.sampler_seconds)
        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            self.device_used = max(self.device_used, total - free)


def one_run(model_path: str, tokenizer, spec: dict, backend: str, staleness: int, args, out_dir: Path) -> dict:
    config = {k: v for k, v in spec.items() if k not in RECIPE_FIELDS_DROPPED and not k.startswith("_")}
    config.update(
        output_dir=str(out_dir),
        max_steps=args.steps,
        save_strategy="no",
        report_to="none",
        logging_steps=1,
        disable_tqdm=True,
        rollout_traces=0,
        sampler_backend=backend,
        max_staleness=staleness,
        health_patience=None,  # a random model teaches nothing; that is not what is measured
    )
    if args.cpu:
        config.update(CPU_OVERRIDES)
    multi_turn = spec["env_name"] == MULTI_TURN
    wait_s = args.env_wait_ms / 1000 if multi_turn else 0.0
    grpo = EnvGRPOConfig(**config)
    data = env_dataset(spec, Renderer(tokenizer), grpo.num_generations, wait_s)
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    ref: list = []
    clock = StepClock(ref)
    trainer = EnvGRPOTrainer(model_path, grpo, data, processing_class=tokenizer, callbacks=[clock])
    trainer.remove_callback(PrinterCallback)  # the per-step log dicts; this bench prints its own lines
    ref.append(trainer)
    clock.start = time.perf_counter()
    trainer.train()
    steps = [b - a for a, b in zip([clock.start, *clock.ends], clock.ends)]
    steady = steps[1:]
    tokens, sampler_s = sum(clock.tokens[1:]), sum(clock.sampler_s[1:])
    run = dict(
        backend=backend,
        max_staleness=staleness,
        env_wait_ms=args.env_wait_ms if multi_turn else 0.0,
        first_step_s=steps[0],
        steady_step_s=statistics.median(steady),
        step_s=steps,
        sampled_tokens_per_step=clock.tokens,
        generation_tokens_per_s=tokens / sampler_s if sampler_s > 0 else None,
        rows_per_step=grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps,
        max_tokens_per_turn=grpo.max_tokens_per_turn or grpo.max_completion_length,
    )
    if torch.cuda.is_available():
        run.update(
            peak_allocated_gb=torch.cuda.max_memory_allocated() / 2**30, device_used_max_gb=clock.device_used / 2**30
        )
    else:
        run["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    del trainer
    return run


def plan(args) -> list[tuple[str, str, int, str]]:
    """The runs, in order of the targets they serve: per model, the single-turn recipe sync, the multi-turn recipe
    sync and async, then the rest; each with every backend."""
    order = [("arithmetic", 0), (MULTI_TURN, 0), (MULTI_TURN, 1), ("arithmetic", 1)]
    order += [(n, k) for n in RECIPES for k in sorted(set(args.staleness)) if (n, k) not in order]
    return [
        (model_id, name, k, backend)
        for model_id in args.models
        for name, k in order
        if name in args.recipes and k in args.staleness
        for backend in args.backends
    ]


# -- headline ------------------------------------------------------------------------------------------------------


def ratios(results: list[dict]) -> dict[str, float]:
    """From measured runs only: each backend's generation tokens/s over generate's (same model, recipe, staleness),
    and sync steady step over async k=1's (same model, recipe, backend)."""
    out = {}
    by_key = {(r["model"], r["recipe"], r["backend"], r["max_staleness"]): r for r in results}
    for (model, name, backend, k), run in by_key.items():
        plain = by_key.get((model, name, "generate", k))
        if backend != "generate" and plain and run["generation_tokens_per_s"] and plain["generation_tokens_per_s"]:
            speedup = run["generation_tokens_per_s"] / plain["generation_tokens_per_s"]
            out[f"{model} {name} k={k}: {backend} generation tokens/s over generate"] = speedup
        sync = by_key.get((model, name, backend, 0))
        if k == 1 and sync:
            out[f"{model} {name} {backend}: sync step over async k=1 step"] = (
                sync["steady_step_s"] / run["steady_step_s"]
            )
    return out


def targets(results: list[dict], judged: bool) -> list[dict]:
    """The issue's three targets from measured numbers: the best measured value of each, MET / NOT MET when
    ``judged`` (a GPU run), else ``None``."""
    small = MODELS[0]
    arith = [r for r in results if r["model"] == small and r["recipe"] == "arithmetic"]
    found = []
    if arith:
        best = min(arith, key=lambda r: r["steady_step_s"])
        found.append(
            dict(
                target=f"0.5B arithmetic steady step <= {TARGET_STEP_S} s",
                measured=best["steady_step_s"],
                by=f"{best['backend']}, max_staleness {best['max_staleness']}",
                met=best["steady_step_s"] <= TARGET_STEP_S,
            )
        )
    plain = next((r for r in arith if r["backend"] == "generate" and r["max_staleness"] == 0), None)
    fast = [r for r in arith if r["backend"] != "generate" and r["max_staleness"] == 0 and r["generation_tokens_per_s"]]
    if plain and plain["generation_tokens_per_s"] and fast:
        best = max(fast, key=lambda r: r["generation_tokens_per_s"])
        speedup = best["generation_tokens_per_s"] / plain["generation_tokens_per_s"]
        found.append(
            dict(
                target=f"generation tokens/s >= {TARGET_GEN_SPEEDUP}x generate (0.5B arithmetic, sync)",
                measured=speedup,
                by=best["backend"],
                met=speedup >= TARGET_GEN_SPEEDUP,
            )
        )
    multi = {
        (r["backend"], r["max_staleness"]): r for r in results if r["model"] == small and r["recipe"] == MULTI_TURN
    }
    pairs = [(b, multi[(b, 0)], multi[(b, 1)]) for b, k in multi if k == 1 and (b, 0) in multi]
    if pairs:
        backend, sync, run = max(pairs, key=lambda p: p[1]["steady_step_s"] / p[2]["steady_step_s"])
        speedup = sync["steady_step_s"] / run["steady_step_s"]
        found.append(
            dict(
                target=f"async k=1 >= {TARGET_ASYNC_SPEEDUP}x sync (0.5B {MULTI_TURN}, env wait "
                f"{run['env_wait_ms']:g} ms)",
                measured=speedup,
                by=backend,
                met=speedup >= TARGET_ASYNC_SPEEDUP,
            )
        )
    for t in found:
        if not judged:
            t["met"] = None
    return found


def headline(target: dict, judged: bool) -> str:
    """One target in a few words: what was measured, by which run, and the verdict (on a GPU)."""
    verdict = ("MET" if target["met"] else "NOT MET") if judged else "not judged"
    return f"{target['target']}: {target['measured']:.2f} ({target['by']}) {verdict}"


def write(out: Path, report: dict) -> None:
    """Write the results JSON (after every run too, so that a run cut short keeps what it measured)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


def device_name(cpu: bool) -> str:
    if not cpu and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads)"


def main(argv=None) -> dict:
    args = parse_args(argv)
    if not args.cpu and not torch.cuda.is_available():
        raise SystemExit("gpu_rollouts: no GPU is visible; run with --cpu for the smoke run on the CPU")
    command = "python bench/gpu_rollouts.py" + ("" if argv is None and len(sys.argv) < 2 else " ")
    command += shlex.join(sys.argv[1:] if argv is None else list(argv))
    device = device_name(args.cpu)
    _common.setup_torch(torch.get_num_threads() if not args.cpu else 1, 0)
    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model())
    print(f"device: {device}")
    print(
        "timed: wall time between optimizer-step ends (first step apart, steady = median of the later ones); "
        "generation tokens/s = tokens sampled in the steady steps' rollouts / their rollouts' time inside the "
        "sampler; peak memory: "
        + ("torch.cuda.max_memory_allocated (this process) and device memory in use (all processes)")
        + (" (on a CPU: peak resident memory)" if args.cpu else "")
    )
    out = (
        Path(args.out) if args.out else RESULTS / f"gpu_rollouts_{re.sub(r'[^a-z0-9]+', '_', device.lower())[:40]}.json"
    )
    header = dict(
        command=command,
        device=device,
        cpu_smoke=args.cpu,
        torch=torch.__version__,
        transformers=__import__("transformers").__version__,
        steps_per_run=args.steps,
    )
    results, not_run, failed = [], [], []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        models_dir = Path(args.model_cache) if args.model_cache else Path(scratch) / "models"
        models_dir.mkdir(parents=True, exist_ok=True)
        paths: dict[str, str] = {}
        for model_id, name, k, backend in plan(args):
            label = f"{model_id} {name} ({RECIPES[name]}) {backend} k={k}"
            if args.budget_min and time.perf_counter() - started > args.budget_min * 60:
                not_run.append(f"{label}: --budget_min {args.budget_min:g} reached")
                continue
            if model_id not in paths:
                paths[model_id] = build_random_model(model_id, tokenizer, models_dir, cpu=args.cpu)
            spec = recipe(name, model_id)
            try:
                run = one_run(paths[model_id], tokenizer, spec, backend, k, args, Path(scratch) / f"run-{len(results)}")
            except Exception as error:  # noqa: BLE001 - one failed run must not lose the others' numbers
                failed.append(f"{label}: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
                print(f"FAILED {failed[-1]}", flush=True)
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                continue
            run.update(model=model_id, recipe=name, recipe_file=spec["_path"])
            results.append(run)
            write(out, dict(header, results=results, failed=failed, partial=True))
            gen = run["generation_tokens_per_s"]
            memory = run.get("peak_allocated_gb", run.get("peak_rss_gb"))
            print(
                f"{label}: steady step {run['steady_step_s']:.3f} s (first {run['first_step_s']:.2f} s), generation "
                f"{'n/a' if gen is None else f'{gen:,.0f}'} tokens/s, peak {memory:.2f} GB",
                flush=True,
            )
    for line in not_run:
        print(f"not run: {line}")
    for line in failed:
        print(f"failed: {line}")
    summary = ratios(results)
    print("\nratios (measured):")
    for key, value in summary.items():
        print(f"  {key}: {value:.2f}x")
    judged = not args.cpu
    found = targets(results, judged)
    print("\ntargets:")
    for t in found:
        verdict = (
            ("MET" if t["met"] else "NOT MET") if judged else "not judged (--cpu smoke run; targets are for a GPU)"
        )
        print(f"  {t['target']}: measured {t['measured']:.2f} ({t['by']}): {verdict}")
    report = dict(header, results=results, failed=failed, not_run=not_run, ratios=summary, targets=found)
    write(out, report)
    print(f"\nwrote {out}")
    print("headline: " + ("; ".join(headline(t, judged) for t in found) or "no target could be computed"))
    return report


if __name__ == "__main__":
    main()
