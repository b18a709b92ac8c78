"""Do rollouts overlapping training pay? EnvGRPOTrainer synchronous vs ``max_staleness`` k = 1, 2.

Throughput (default): a multi-turn "tool" env whose every step awaits I/O for a random 50-150 ms (``--wait_ms``; an
``asyncio.sleep``, as a tool, judge or env-server call would) is trained on the offline tiny model, once per mode:
``sync`` (``max_staleness=0``), ``async k=1``, ``async k=2``; then the same env with no wait, ``sync`` and
``async k=1``. Each run trains ``--warmup`` + ``--steps`` optimizer steps; what is timed is the wall time from the
end of the last warm-up step to the end of the last step (``on_step_end`` callbacks). Printed per run: episodes/s
and trained tokens/s (sampled action tokens: the env's ``action_tokens`` per episode x episodes), and for the
synchronous runs the split of a step into rollout (sampling + env wait; the rollout's own wall clock) and the rest
(scoring, loss, backward, optimizer). The env wait per step is the sync rollout with waits minus the one without.
Headline: async/sync ratios of episodes/s, with targets k=1 >= 1.6x where env wait ~ training time, >= 1.0x with
no env wait. Runs of the different modes are interleaved per repeat (``--repeats``) so drift of a shared machine hits
them alike; the summary takes the median over repeats.

Learning parity (``--parity``): the single-turn arithmetic env of bench/learning_parity.py, sync vs async k=1, the
same seeds, problems and settings; per run the mean training reward over all steps and the sampled accuracy on every
sum of the operand range (learning_parity's evaluator); prints mean |Δ| over seeds (target <= 0.03) and |Δ| of the
means. ``--control`` adds a synchronous run per seed that differs from the first only in its sampling random stream:
its mean |Δ| to the first is the noise floor of the measure.

    python bench/async_rollouts.py                      # throughput, about 2-3 minutes on 2 cores
    python bench/async_rollouts.py --parity --seeds 0 1 --parity_steps 60      # about 1 minute
    python bench/async_rollouts.py --parity --seeds 0 1 2 3 4 5 6 7 --parity_steps 300    # about 13 minutes
    python bench/async_rollouts.py --parity --control --seeds 0 1 2 3 4 5 6 7 --parity_steps 300   # about 20 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence

import _common  # noqa: F401 - offline settings first
import torch  # noqa: E402
from transformers import AutoTokenizer, PrinterCallback, TrainerCallback  # noqa: E402

from trl_envs import (  # noqa: E402
    EnvGroupBuilder,
    EnvGRPOConfig,
    EnvGRPOTrainer,
    MessageEnv,
    MessageStepResult,
    MessageTokenEnv,
    Renderer,
    RLDataset,
)
from trl_envs.tiny_model import build_tiny_model  # noqa: E402

TARGET_WAIT, TARGET_NO_WAIT, TARGET_PARITY = 1.6, 1.0, 0.03
CONTROL_SEED_OFFSET = 1000


class ToolEnv(MessageEnv):
    """``turns`` turns; every step awaits a random wait in ``wait_ms`` (I/O), then replies. Reward: the reply's
    length mod 3, halved (varies within a group, so GRPO has a signal)."""

    def __init__(self, turns: int, wait_ms: tuple[float, float], rng: random.Random):
        self.turns, self.wait_ms, self.rng, self.t = turns, wait_ms, rng, 0

    async def initial_messages(self):
        return [{"role": "user", "content": "Look this up with the tool, then answer."}]

    async def step(self, response):
        lo, hi = self.wait_ms
        if hi > 0:
            await asyncio.sleep(self.rng.uniform(lo, hi) / 1000)
        self.t += 1
        done = self.t >= self.turns
        reward = (len(response.message["content"]) % 3) / 2 if done else 0.0
        return MessageStepResult(reward, done, [] if done else [{"role": "user", "content": "Tool result: 42."}])


def tool_dataset(renderer: Renderer, args, wait_ms: tuple[float, float]) -> RLDataset:
    class Group(EnvGroupBuilder):
        def __init__(self, seed: int):
            self.seed = seed

        async def make_envs(self):
            rng = random.Random(self.seed)
            return [MessageTokenEnv(ToolEnv(args.turns, wait_ms, rng), renderer) for _ in range(args.group_size)]

    class Dataset(RLDataset):
        def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
            return [Group(index * 1000 + g) for g in range(args.groups_per_step)]

        def __len__(self) -> int:
            return args.warmup + args.steps + 4

    return Dataset()


class StepClock(TrainerCallback):
    def __init__(self):
        self.ends: list[float] = []

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


def throughput_run(model_path, tokenizer, args, k: int, wait_ms) -> dict:
    out = tempfile.mkdtemp(prefix="async-bench-")
    config = EnvGRPOConfig(
        output_dir=out,
        use_cpu=True,
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        disable_tqdm=True,
        seed=args.seed,
        num_generations=args.group_size,
        per_device_train_batch_size=args.group_size * args.groups_per_step,
        max_steps=args.warmup + args.steps,
        learning_rate=1e-4,
        beta=0.0,
        max_completion_length=args.max_tokens,
        max_turns=args.turns,
        logging_steps=1,
        save_strategy="no",
        max_staleness=k,
    )
    clock = StepClock()
    trainer = EnvGRPOTrainer(
        model_path,
        config,
        tool_dataset(Renderer(tokenizer), args, wait_ms),
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.remove_callback(PrinterCallback)
    rollout_seconds: list[float] = []
    if k == 0:
        original = trainer.generation_batch  # every generation batch goes through it

        def timed(keys):
            batch = original(keys)
            rollout_seconds.append(trainer.last_rollout.wall_seconds)
            return batch

        trainer.generation_batch = timed
    trainer.train()
    shutil.rmtree(out, ignore_errors=True)
    logs = [h for h in trainer.state.log_history if "env/all/action_tokens" in h][args.warmup :]
    episodes_per_step = args.group_size * args.groups_per_step
    seconds = clock.ends[-1] - clock.ends[args.warmup - 1]
    steps = len(clock.ends) - args.warmup
    step_seconds = seconds / steps
    rollout = statistics.median(rollout_seconds[args.warmup :]) if rollout_seconds else None
    return dict(
        episodes_per_s=steps * episodes_per_step / seconds,
        tokens_per_s=sum(h["env/all/action_tokens"] * episodes_per_step for h in logs) / seconds,
        step_s=step_seconds,
        rollout_s=rollout,
        staleness=statistics.fmean(h["async/staleness"] for h in logs) if k else 0.0,
        trainer_wait_s=statistics.fmean(h["async/trainer_wait_s"] for h in logs) if k else None,
    )


MODES = [
    ("sync, env wait", 0, True),
    ("async k=1, env wait", 1, True),
    ("async k=2, env wait", 2, True),
    ("sync, no env wait", 0, False),
    ("async k=1, no env wait", 1, False),
]


def throughput(model_path, tokenizer, args) -> dict[str, float]:
    """Run every mode, print the table and headlines; return each mode's episodes/s ratio to its sync run."""
    lo, hi = args.wait_ms
    print(
        f"tiny model; {args.groups_per_step} groups x {args.group_size} episodes per step, {args.turns} turns per "
        f"episode, env wait {lo:.0f}-{hi:.0f} ms per env step; {args.warmup} warm-up + {args.steps} timed steps per "
        f"run; {args.repeats} repeat(s), modes interleaved; torch threads {args.threads}. Timed: wall clock from the "
        "end of the last warm-up step to the end of the last step.",
        flush=True,
    )
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in MODES}
    for r in range(args.repeats):
        for name, k, wait in MODES:
            res = throughput_run(model_path, tokenizer, args, k, (lo, hi) if wait else (0.0, 0.0))
            runs[name].append(res)
            extra = (
                f"; rollout {res['rollout_s']:.3f} s + rest {res['step_s'] - res['rollout_s']:.3f} s per step"
                if res["rollout_s"] is not None
                else f"; mean staleness {res['staleness']:.2f}, trainer wait {res['trainer_wait_s']:.3f} s/step"
            )
            print(
                f"  repeat {r}: {name:24s} {res['episodes_per_s']:7.2f} episodes/s {res['tokens_per_s']:8.1f} "
                f"tokens/s  {res['step_s']:.3f} s/step{extra}",
                flush=True,
            )
    med = {
        name: {key: statistics.median(x[key] for x in v) for key in ("episodes_per_s", "tokens_per_s", "step_s")}
        for name, v in runs.items()
    }
    sync_wait = statistics.median(x["rollout_s"] for x in runs["sync, env wait"])
    sync_free = statistics.median(x["rollout_s"] for x in runs["sync, no env wait"])
    train_rest = med["sync, env wait"]["step_s"] - sync_wait
    print(
        f"\nsync step with env wait: rollout {sync_wait:.3f} s (of which env wait ~{sync_wait - sync_free:.3f} s) + "
        f"training {train_rest:.3f} s (medians); env wait / training = {(sync_wait - sync_free) / train_rest:.2f}"
    )
    print(f"{'mode':26s} {'episodes/s':>10s} {'tokens/s':>9s} {'s/step':>7s} {'vs sync':>8s}")
    ratios = {}
    for name, _, wait in MODES:
        base = med["sync, env wait" if wait else "sync, no env wait"]
        ratios[name] = ratio = med[name]["episodes_per_s"] / base["episodes_per_s"]
        print(
            f"{name:26s} {med[name]['episodes_per_s']:10.2f} {med[name]['tokens_per_s']:9.1f} "
            f"{med[name]['step_s']:7.3f} {ratio:7.2f}x"
        )
    r_wait = med["async k=1, env wait"]["episodes_per_s"] / med["sync, env wait"]["episodes_per_s"]
    r_free = med["async k=1, no env wait"]["episodes_per_s"] / med["sync, no env wait"]["episodes_per_s"]
    ratios["met"] = True
    for label, ratio, target in (("with env wait", r_wait, TARGET_WAIT), ("no env wait", r_free, TARGET_NO_WAIT)):
        met = ratio >= target
        ratios["met"] &= met
        print(
            f"HEADLINE async k=1 / sync episodes/s, {label}: {ratio:.2f}x (target >= {target}x): "
            f"{'MET' if met else 'NOT MET'}"
        )
    return ratios


class _ReseedSampling(TrainerCallback):
    """Reseed torch's global generator when training starts: the synchronous sampler's random stream (the data order
    has its own generator), so a second synchronous run differs from the first in its samples only."""

    def __init__(self, seed: int):
        self.seed = seed

    def on_train_begin(self, args, state, control, **kwargs):
        torch.manual_seed(self.seed)


def parity(model_path, tokenizer, args) -> bool:
    import learning_parity as lp

    settings = argparse.Namespace(
        groups_per_step=4, group_size=8, steps=args.parity_steps, max_operand=3, lr=1e-3, max_tokens=16, samples=16
    )
    sides = [("sync", 0, None), ("async k=1", 1, None)]
    if args.control:
        sides.append(("sync, other sampling stream", 0, CONTROL_SEED_OFFSET))
    print(
        f"learning parity: arithmetic (operands 0..3), {args.parity_steps} steps of 4 groups x 8, lr 1e-3, seeds "
        f"{args.seeds}; {', '.join(name for name, _, _ in sides)}; sampled accuracy: every sum of the operand range "
        "(all 16, the problems trained on: the range has no others) x 16 samples at T=1",
        flush=True,
    )
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in sides}
    for seed in args.seeds:
        for name, k, offset in sides:
            torch.manual_seed(seed)
            out = tempfile.mkdtemp(prefix="async-parity-")
            trainer = EnvGRPOTrainer(
                model_path,
                EnvGRPOConfig(**lp.common(out, seed, settings), max_turns=1, max_staleness=k),
                lp.env_builder(Renderer(tokenizer), seed, settings),
                processing_class=tokenizer,
                callbacks=[_ReseedSampling(seed + offset)] if offset is not None else None,
            )
            trainer.remove_callback(PrinterCallback)
            start = time.perf_counter()
            trainer.train()
            seconds = time.perf_counter() - start
            shutil.rmtree(out, ignore_errors=True)
            reward = statistics.fmean(h["reward"] for h in trainer.state.log_history if "reward" in h)
            sampled = lp.accuracy(trainer.model, tokenizer, 3, greedy=False, samples=16, max_tokens=16, seed=seed)
            figures[name].append((reward, sampled))
            print(
                f"  seed {seed} {name}: training reward {reward:.3f}, sampled accuracy {sampled:.3f} ({seconds:.0f} s)",
                flush=True,
            )
    ok = True
    for i, figure in enumerate(("training reward", "sampled accuracy")):
        sync = [x[i] for x in figures["sync"]]
        for name, _, _ in sides[1:]:
            other = [x[i] for x in figures[name]]
            per_seed = statistics.fmean(abs(a - b) for a, b in zip(sync, other))
            of_means = abs(statistics.fmean(sync) - statistics.fmean(other))
            line = (
                f"{figure:17s} sync {statistics.fmean(sync):.3f}  {name} {statistics.fmean(other):.3f}  "
                f"mean |Δ| over seeds {per_seed:.3f}, |Δ| of the means {of_means:.3f}"
            )
            if name == "async k=1":
                met = per_seed <= TARGET_PARITY
                ok &= met
                line += f" (target mean |Δ| <= {TARGET_PARITY}): {'MET' if met else 'NOT MET'}"
            else:
                line += " (the noise floor: two synchronous runs that differ only in their samples)"
            print(line)
    return ok


def main(argv=None):
    """Returns the throughput ratios (a dict) or the parity verdict; as a script, the exit status."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--group_size", type=int, default=4)
    parser.add_argument("--groups_per_step", type=int, default=16)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--max_tokens", type=int, default=8, help="max_completion_length (tokens per turn)")
    parser.add_argument(
        "--wait_ms",
        type=float,
        nargs=2,
        default=[50.0, 150.0],
        metavar=("LO", "HI"),
        help="env wait per env step, uniform in [LO, HI] ms (default sized so env wait ~ training "
        "time per step on the tiny model)",
    )
    parser.add_argument("--parity", action="store_true", help="run the learning-parity check instead")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--parity_steps", type=int, default=60)
    parser.add_argument(
        "--control",
        action="store_true",
        help="parity: also a synchronous run with another sampling stream per seed (the noise floor of mean |Δ|)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_path = build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    return parity(model_path, tokenizer, args) if args.parity else throughput(model_path, tokenizer, args)


if __name__ == "__main__":
    result = main()
    ok = result if isinstance(result, bool) else result["met"]
    sys.exit(1 if "--check" in sys.argv and not ok else 0)
