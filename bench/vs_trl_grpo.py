"""What do environments cost over plain TRL? Per-step time of EnvGRPOTrainer vs GRPOTrainer.

The same single-turn arithmetic task, model and settings are trained (a) by TRL's plain ``GRPOTrainer`` on a prompt
dataset with an equivalent reward function (1 right / 0 wrong, -0.1 when the answer, read as the env reads it, is
missing or does not end on EOS) and (b) by ``EnvGRPOTrainer`` on the built-in ``arithmetic`` env. Both generate
with transformers ``generate``, from the same seed, on the same problems in the same order (the plain dataset is
made from the env dataset's groups), so both sides sample and train on the same tokens: what differs is the code
around them.

How: the two sides run in two processes (spawned once per model, each making ``--repeats`` runs) that take turns
step by step, passing a baton at every ``on_step_begin``: one process works while the other waits, so drift of a
shared machine (other jobs, memory bandwidth) hits the k-th step of both sides alike. Everything outside the timed
steps (building a trainer, logging, tearing down) is done while holding the baton, so it never overlaps the other
side's timed step. By default (``--malloc adaptive``) both processes run with glibc's own malloc thresholds, as
users do: memory the env path allocates and hands back (minor page faults, printed per run) is part of its cost.
Under them a run settles, at random, at ~1,150 to ~3,400 minor page faults per step, which moves one side's step
time by up to 30% between runs of the same code. ``--malloc fixed`` fixes the thresholds in both processes
(``mallopt``: mmap threshold 32 MiB, trim threshold 256 MiB, top pad 64 MiB), so freed memory stays in the process:
steadier, but every step is slower on both sides (median plain TRL step 0.084 vs 0.061 s, 3 runs each), which
flatters the ratio; use it to diagnose, not for the headline.

What is timed: each optimizer step, from the trainer's ``on_step_begin`` (after the baton came back) to
``on_step_end`` callback (generation, rewards, loss, backward, optimizer), both as wall time and as the process's
CPU time (all threads). The first ``--warmup`` steps of each run are left out. Printed per model: the median step
time of each side over all measured steps, the per-run medians (the spread), and the ratio env/plain of the
medians (the headline, checked against the target); also the median and range of the per-run ratios and the
median of the per-step ratios (env step k / plain step k of the same run: steps that ran back to back). Per run,
the median per step of the process's voluntary context switches (a thread blocking to wait: each is a scheduling
delay when other jobs share the CPU) and of its minor page faults (memory handed back and fetched again). Models:

* ``tiny``: the offline tiny chat model (64 wide, 2 layers): overhead shows most. Target: ratio <= 1.05.
* ``wide``: a randomly initialised Qwen2 built here (512 wide, 8 layers, 8 heads, the tiny tokenizer; about 25M
  parameters), sampling ``--wide_max_tokens`` tokens, so generation dominates the step. Target: ratio <= 1.02.

``--handicap SIDE:MS`` burns MS ms of CPU time inside every timed step of one side (a self-check: the ratio must move).

    python bench/vs_trl_grpo.py                       # both models
    python bench/vs_trl_grpo.py --models tiny --steps 20 --repeats 3
"""

from __future__ import annotations

import argparse
import ctypes
import multiprocessing
import queue
import resource
import tempfile
import time
import traceback

import _common  # offline settings first
from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, Renderer  # noqa: E402
from trl_envs.envs.arithmetic import ArithmeticDatasetBuilder, question, read_answer  # noqa: E402
from trl_envs.rollout.event_loop import run_sync  # noqa: E402
from trl_envs.tiny_model import build_tiny_model  # noqa: E402

TARGETS = {"tiny": 1.05, "wide": 1.02}
NUM_BATCHES = 1000
WIDE_CONFIG = dict(
    hidden_size=512,
    intermediate_size=1536,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=1024,
)


SIDES = ("plain", "env")


class Baton:
    """Two processes taking turns (see the module docstring): :meth:`start` waits until both are ready and it is
    this side's turn, :meth:`pass_` hands the turn over and waits for it to come back, :meth:`finish` hands it over
    for good. A side whose partner has finished (or died) runs on alone."""

    def __init__(self, ctx):
        self._cond = ctx.Condition()
        self._turn = ctx.Value("i", 0, lock=False)
        self._ready = ctx.Value("i", 0, lock=False)
        self._done = ctx.Array("i", 2, lock=False)

    def start(self, me: int) -> None:
        with self._cond:
            self._ready.value += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._ready.value == 2 or self._done[1 - me])
            self._cond.wait_for(lambda: self._turn.value == me or self._done[1 - me])

    def pass_(self, me: int) -> None:
        with self._cond:
            if self._done[1 - me]:
                return
            self._turn.value = 1 - me
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._turn.value == me or self._done[1 - me])

    def finish(self, me: int) -> None:
        with self._cond:
            self._done[me] = 1
            self._turn.value = 1 - me
            self._cond.notify_all()


class StepTimer(TrainerCallback):
    """Wall and process-CPU seconds, voluntary context switches and minor page faults of each step (the process's:
    all threads); optionally burns ``handicap_s`` of CPU inside each. With a ``baton``, hands the turn to the other
    side before each step (before the clocks start)."""

    def __init__(self, handicap_s: float = 0.0, baton: Baton | None = None, me: int = 0):
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.switches: list[int] = []
        self.faults: list[int] = []
        self.handicap_s = handicap_s
        self.baton, self.me = baton, me

    def on_step_begin(self, args, state, control, **kwargs):
        if self.baton is not None:
            self.baton.pass_(self.me)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._switches, self._faults = usage.ru_nvcsw, usage.ru_minflt
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        _common.busy_wait(self.handicap_s)  # CPU time: the same slowdown on a loaded machine

    def on_step_end(self, args, state, control, **kwargs):
        self.wall.append(time.perf_counter() - self._wall)
        self.cpu.append(time.process_time() - self._cpu)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.switches.append(usage.ru_nvcsw - self._switches)
        self.faults.append(usage.ru_minflt - self._faults)


def common(out: str, args, max_tokens: int) -> dict:
    return dict(
        output_dir=out,
        use_cpu=True,
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        disable_tqdm=True,
        seed=0,
        num_generations=args.group_size,
        per_device_train_batch_size=args.group_size * args.groups_per_step,
        max_steps=args.steps,
        learning_rate=args.lr,
        beta=0.0,
        max_completion_length=max_tokens,
        logging_steps=10_000,
        save_strategy="no",
        shuffle_dataset=False,
    )


def env_builder(tokenizer, args) -> ArithmeticDatasetBuilder:
    return ArithmeticDatasetBuilder(
        Renderer(tokenizer), batch_size=args.groups_per_step, group_size=args.group_size, num_batches=NUM_BATCHES
    )


def env_problems(tokenizer, args, num_batches: int) -> list[tuple[int, int]]:
    """The ``(a, b)`` of the env side's groups, in training order (its first ``num_batches`` batches)."""
    train, _ = run_sync(env_builder(tokenizer, args))
    return [(g.a, g.b) for i in range(num_batches) for g in train.get_batch(i)]


def plain_dataset(problems: list[tuple[int, int]]) -> Dataset:
    """One prompt row per env group: the same questions, in the same order, as the env side."""
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": question(a, b)}] for a, b in problems],
            "answer": [a + b for a, b in problems],
        }
    )


def make_reward(eos_id: int):
    def arithmetic_reward(completions, completion_ids, answer, **kwargs):
        out = []
        for c, ids, ans in zip(completions, completion_ids, answer):
            value = read_answer(c[0]["content"])  # the env's own reading of an answer
            format_ok = value is not None and len(ids) > 0 and ids[-1] == eos_id
            out.append(0.1 * (float(format_ok) - 1.0) + float(value == ans))
        return out

    return arithmetic_reward


def time_plain(model_path, tokenizer, args, max_tokens: int, timer: StepTimer) -> StepTimer:
    with tempfile.TemporaryDirectory() as out:
        trainer = GRPOTrainer(
            model_path,
            reward_funcs=[make_reward(tokenizer.eos_token_id)],
            args=GRPOConfig(**common(out, args, max_tokens)),
            train_dataset=plain_dataset(env_problems(tokenizer, args, args.steps + 1)),
            processing_class=tokenizer,
            callbacks=[timer],
        )
        trainer.train()
    return timer


def time_env(model_path, tokenizer, args, max_tokens: int, timer: StepTimer) -> StepTimer:
    with tempfile.TemporaryDirectory() as out:
        trainer = EnvGRPOTrainer(
            model_path,
            EnvGRPOConfig(**common(out, args, max_tokens), max_turns=1),
            env_builder(tokenizer, args),
            processing_class=tokenizer,
            callbacks=[timer],
        )
        trainer.train()
    return timer


def build_wide_model(tiny_path: str, directory: str) -> str:
    """A randomly initialised Qwen2 of ``WIDE_CONFIG`` with the tiny model's tokenizer, saved to ``directory``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_sliding_window=False,
        **WIDE_CONFIG,
    )
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config.bos_token_id = None
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


MALLOC_SETTINGS = {"mmap threshold": (-3, 32 << 20), "trim threshold": (-1, 256 << 20), "top pad": (-2, 64 << 20)}
"""glibc ``mallopt`` parameters (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_TOP_PAD) set by ``--malloc fixed``."""


def fix_malloc_thresholds() -> bool:
    """Set :data:`MALLOC_SETTINGS` in this process (glibc only); whether they were all accepted."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(param, value) == 1 for param, value in MALLOC_SETTINGS.values())


def _side_worker(
    side: str, model_path: str, args_dict: dict, max_tokens: int, handicap_s: float, baton: Baton, results
) -> None:
    """One side's process: ``--repeats`` runs, taking turns with the other side step by step."""
    me = SIDES.index(side)
    try:
        args = argparse.Namespace(**args_dict)
        if args.malloc == "fixed" and not fix_malloc_thresholds():
            raise RuntimeError("--malloc fixed: glibc's mallopt is not available here; use --malloc adaptive")
        _common.setup_torch(args.threads, args.seed)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        run = time_plain if side == "plain" else time_env
        baton.start(me)
        runs = []
        for _ in range(args.repeats):
            timer = run(model_path, tokenizer, args, max_tokens, StepTimer(handicap_s, baton, me))
            runs.append((timer.wall, timer.cpu, timer.switches, timer.faults))
        results.put((side, runs, None))
    except BaseException:  # noqa: BLE001 - reported by the parent
        results.put((side, None, traceback.format_exc()))
    finally:
        baton.finish(me)


def run_sides(model_path: str, args, max_tokens: int, handicap: dict[str, float]) -> dict[str, list]:
    """Both sides' runs (see the module docstring): ``{side: [(wall, cpu, switches, faults) per run]}``."""
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter per side: no torch state forked
    baton, results = Baton(ctx), ctx.Queue()
    procs = [
        ctx.Process(
            target=_side_worker,
            args=(side, model_path, vars(args), max_tokens, handicap.get(side, 0.0), baton, results),
            daemon=True,
        )
        for side in SIDES
    ]
    for p in procs:
        p.start()
    runs: dict[str, list] = {}
    try:
        while len(runs) < len(SIDES):
            try:
                side, side_runs, error = results.get(timeout=5.0)
            except queue.Empty:
                dead = [SIDES[i] for i, p in enumerate(procs) if not p.is_alive() and SIDES[i] not in runs]
                if dead:
                    raise RuntimeError(
                        f"vs_trl_grpo: the {', '.join(dead)} process died without a result "
                        f"(exit codes {[p.exitcode for p in procs]})"
                    ) from None
                continue
            if error is not None:
                raise RuntimeError(f"vs_trl_grpo: the {side} side failed:\n{error}")
            runs[side] = side_runs
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.terminate()
    return runs


def measure(name: str, model_path: str, args, max_tokens: int, handicap: dict[str, float]) -> dict:
    runs = run_sides(model_path, args, max_tokens, handicap)
    w = args.warmup
    for r in range(args.repeats):
        (pw, pc, ps, pf), (ew, ec, es, ef) = runs["plain"][r], runs["env"][r]
        print(
            f"[{name}] run {r}: plain median {_common.median(pw[w:]):.4f} s wall {_common.median(pc[w:]):.4f} s "
            f"cpu; env median {_common.median(ew[w:]):.4f} s wall {_common.median(ec[w:]):.4f} s cpu; per step, "
            f"voluntary context switches plain {_common.median(ps[w:]):g} env {_common.median(es[w:]):g}, minor "
            f"page faults plain {_common.median(pf[w:]):g} env {_common.median(ef[w:]):g}",
            flush=True,
        )
    out = {}
    for clock, k in (("wall", 0), ("cpu", 1)):
        steps = {side: [t for run in runs[side] for t in run[k][w:]] for side in SIDES}
        per_run = {side: [_common.median(run[k][w:]) for run in runs[side]] for side in SIDES}
        ratio = _common.median(steps["env"]) / _common.median(steps["plain"])
        run_ratios = [e / p for e, p in zip(per_run["env"], per_run["plain"])]
        step_ratios = [e / p for pr, er in zip(runs["plain"], runs["env"]) for p, e in zip(pr[k][w:], er[k][w:])]
        print(
            f"[{name}] {clock} time per step, median of {len(steps['plain'])} plain / {len(steps['env'])} env "
            f"steps: plain GRPOTrainer {_common.median(steps['plain']):.4f} s "
            f"{_common.spread(per_run['plain'], '{:.4f}')}, EnvGRPOTrainer {_common.median(steps['env']):.4f} s "
            f"{_common.spread(per_run['env'], '{:.4f}')}; ratio env/plain {ratio:.3f} "
            f"(per run {', '.join(f'{x:.3f}' for x in run_ratios)}: median {_common.median(run_ratios):.3f}, "
            f"range {min(run_ratios):.3f}-{max(run_ratios):.3f}; median per-step ratio "
            f"{_common.median(step_ratios):.3f} over {len(step_ratios)} step pairs)"
        )
        out[clock] = ratio
        out[f"{clock}_run_ratios"] = run_ratios
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common.add_common_args(parser, repeats=3, warmup=3)
    parser.add_argument("--models", default="tiny,wide", help="comma-separated: tiny, wide")
    parser.add_argument("--steps", type=int, default=15, help="optimizer steps per run (first --warmup left out)")
    parser.add_argument("--wide_steps", type=int, default=6, help="steps per run for the wide model")
    parser.add_argument("--group_size", type=int, default=8)
    parser.add_argument("--groups_per_step", type=int, default=4)
    parser.add_argument("--max_tokens", type=int, default=8)
    parser.add_argument("--wide_max_tokens", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--model_path", default=None, help="the tiny model (default: build/load the offline one)")
    parser.add_argument(
        "--malloc",
        choices=("fixed", "adaptive"),
        default="adaptive",
        help="adaptive (default): glibc's own thresholds, as users run; fixed: both processes fix "
        "glibc's malloc thresholds (fewer, steadier page faults, slower steps)",
    )
    parser.add_argument(
        "--handicap",
        default=None,
        metavar="SIDE:MS",
        help="busy-wait MS ms in each step of SIDE (plain or env): a self-check",
    )
    args = parser.parse_args(argv)
    _common.setup_torch(args.threads, args.seed)
    handicap: dict[str, float] = {}
    if args.handicap:
        side, ms = args.handicap.split(":")
        if side not in ("plain", "env"):
            parser.error(f"--handicap side must be plain or env, got {side!r}")
        handicap[side] = float(ms) / 1000
    print(
        f"timed: each optimizer step (on_step_begin..on_step_end), wall and process CPU time, {args.repeats} runs "
        f"per side in two processes taking turns step by step (same problems, same seed), first {args.warmup} "
        f"steps of each run left out; torch threads {args.threads}; malloc thresholds {args.malloc}"
        + (
            f" ({', '.join(f'{k} {v >> 20} MiB' for k, (_, v) in MALLOC_SETTINGS.items())})"
            if args.malloc == "fixed"
            else ""
        )
        + (f"; handicap {args.handicap} ms" if handicap else "")
    )
    tiny_path = args.model_path or build_tiny_model()
    targets = _common.Targets()
    results = {}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name == "tiny":
            ratios = measure("tiny", tiny_path, args, args.max_tokens, handicap)
        elif name == "wide":
            with tempfile.TemporaryDirectory() as wide_dir:
                wide_args = argparse.Namespace(
                    **{**vars(args), "steps": args.wide_steps, "warmup": min(args.warmup, args.wide_steps - 1)}
                )
                ratios = measure(
                    "wide", build_wide_model(tiny_path, wide_dir), wide_args, args.wide_max_tokens, handicap
                )
        else:
            parser.error(f"unknown model {name!r} (tiny, wide)")
        results[name] = ratios
        for clock in ("cpu", "wall"):
            targets.add(
                f"[{name}] ratio env/plain of median {clock} step time {ratios[clock]:.3f} <= {TARGETS[name]:.2f}",
                ratios[clock] <= TARGETS[name],
            )
    targets.finish(args.check)
    return results


if __name__ == "__main__":
    main()
