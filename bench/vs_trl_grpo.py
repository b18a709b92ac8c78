"""What do environments cost over plain TRL? Per-step time of EnvGRPOTrainer vs GRPOTrainer.

The same single-turn arithmetic task, model and settings are trained (a) by TRL's plain ``GRPOTrainer`` on a prompt
dataset with an equivalent reward function (1 right / 0 wrong, -0.1 when the answer, read as the env reads it, is
missing or does not end on EOS) and (b) by ``EnvGRPOTrainer`` on the built-in ``arithmetic`` env. Both generate
with transformers ``generate``. Runs alternate (plain, env, plain, env, ...) so drift on a shared machine hits both.

What is timed: each optimizer step, from the trainer's ``on_step_begin`` to ``on_step_end`` callback (generation,
rewards, loss, backward, optimizer), both as wall time and as this process's CPU time (all threads; less sensitive
to other jobs on a shared machine). The first ``--warmup`` steps of each run are left out. Printed per model: the
median step time of each side over all measured steps, the per-run medians (the spread), and the ratio env/plain
of the medians. Also per run, the median per step of the process's voluntary context switches (a thread blocking
to wait: each is a scheduling delay when other jobs share the CPU, so a wall/CPU gap that an idle machine does not
show) and of its minor page faults (memory handed back and fetched again). Models:

* ``tiny``: the offline tiny chat model (64 wide, 2 layers): overhead shows most. Target: ratio <= 1.10.
* ``wide``: a randomly initialised Qwen2 built here (512 wide, 8 layers, 8 heads, the tiny tokenizer; about 25M
  parameters), sampling ``--wide_max_tokens`` tokens, so generation dominates the step. Target: ratio <= 1.02.

``--handicap SIDE:MS`` busy-waits MS ms inside every timed step of one side (a self-check: the ratio must move).

    python bench/vs_trl_grpo.py                       # both models
    python bench/vs_trl_grpo.py --models tiny --steps 20 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import tempfile
import time

import _common  # noqa: F401 - offline settings first

from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, Renderer  # noqa: E402
from trl_envs.envs.arithmetic import ArithmeticDatasetBuilder, question, read_answer  # noqa: E402
from trl_envs.tiny_model import build_tiny_model  # noqa: E402

TARGETS = {"tiny": 1.10, "wide": 1.02}
WIDE_CONFIG = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
                   num_key_value_heads=4, max_position_embeddings=1024)


class StepTimer(TrainerCallback):
    """Wall and process-CPU seconds, voluntary context switches and minor page faults of each step (the process's:
    all threads); optionally burns ``handicap_s`` of CPU inside each."""

    def __init__(self, handicap_s: float = 0.0):
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.switches: list[int] = []
        self.faults: list[int] = []
        self.handicap_s = handicap_s

    def on_step_begin(self, args, state, control, **kwargs):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self._switches, self._faults = usage.ru_nvcsw, usage.ru_minflt
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        end = time.perf_counter() + self.handicap_s
        while time.perf_counter() < end:
            pass

    def on_step_end(self, args, state, control, **kwargs):
        self.wall.append(time.perf_counter() - self._wall)
        self.cpu.append(time.process_time() - self._cpu)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.switches.append(usage.ru_nvcsw - self._switches)
        self.faults.append(usage.ru_minflt - self._faults)


def common(out: str, args, max_tokens: int) -> dict:
    return dict(output_dir=out, use_cpu=True, bf16=False, report_to="none", gradient_checkpointing=False,
                disable_tqdm=True, seed=0, num_generations=args.group_size,
                per_device_train_batch_size=args.group_size * args.groups_per_step, max_steps=args.steps,
                learning_rate=args.lr, beta=0.0, max_completion_length=max_tokens, logging_steps=10_000,
                save_strategy="no", shuffle_dataset=False)


def plain_dataset(n: int, max_operand: int = 9) -> Dataset:
    rng = random.Random("vs_trl_grpo")
    rows = [(rng.randint(0, max_operand), rng.randint(0, max_operand)) for _ in range(n)]
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": question(a, b)}] for a, b in rows],
                              "answer": [a + b for a, b in rows]})


def make_reward(eos_id: int):
    def arithmetic_reward(completions, completion_ids, answer, **kwargs):
        out = []
        for c, ids, ans in zip(completions, completion_ids, answer):
            value = read_answer(c[0]["content"])  # the env's own reading of an answer
            format_ok = value is not None and len(ids) > 0 and ids[-1] == eos_id
            out.append(0.1 * (float(format_ok) - 1.0) + float(value == ans))
        return out

    return arithmetic_reward


def time_plain(model_path, tokenizer, args, max_tokens: int, handicap_s: float) -> StepTimer:
    timer = StepTimer(handicap_s)
    with tempfile.TemporaryDirectory() as out:
        trainer = GRPOTrainer(model_path, reward_funcs=[make_reward(tokenizer.eos_token_id)],
                              args=GRPOConfig(**common(out, args, max_tokens)), train_dataset=plain_dataset(4000),
                              processing_class=tokenizer, callbacks=[timer])
        trainer.train()
    return timer


def time_env(model_path, tokenizer, args, max_tokens: int, handicap_s: float) -> StepTimer:
    timer = StepTimer(handicap_s)
    with tempfile.TemporaryDirectory() as out:
        builder = ArithmeticDatasetBuilder(Renderer(tokenizer), batch_size=args.groups_per_step,
                                           group_size=args.group_size, num_batches=1000)
        trainer = EnvGRPOTrainer(model_path, EnvGRPOConfig(**common(out, args, max_tokens), max_turns=1), builder,
                                 processing_class=tokenizer, callbacks=[timer])
        trainer.train()
    return timer


def build_wide_model(tiny_path: str, directory: str) -> str:
    """A randomly initialised Qwen2 of ``WIDE_CONFIG`` with the tiny model's tokenizer, saved to ``directory``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), tie_word_embeddings=True, bos_token_id=None,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         use_sliding_window=False, **WIDE_CONFIG)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config.bos_token_id = None
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def measure(name: str, model_path: str, args, max_tokens: int, handicap: dict[str, float]) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    runs = {"plain": [], "env": []}
    for r in range(args.repeats):
        waits = {}
        for side, fn in (("plain", time_plain), ("env", time_env)):
            timer = fn(model_path, tokenizer, args, max_tokens, handicap.get(side, 0.0))
            runs[side].append((timer.wall[args.warmup:], timer.cpu[args.warmup:]))
            waits[side] = (_common.median(timer.switches[args.warmup:]), _common.median(timer.faults[args.warmup:]))
        print(f"[{name}] run {r}: plain median {_common.median(runs['plain'][-1][0]):.4f} s wall "
              f"{_common.median(runs['plain'][-1][1]):.4f} s cpu; env median {_common.median(runs['env'][-1][0]):.4f} "
              f"s wall {_common.median(runs['env'][-1][1]):.4f} s cpu; per step, voluntary context switches plain "
              f"{waits['plain'][0]:g} env {waits['env'][0]:g}, minor page faults plain {waits['plain'][1]:g} env "
              f"{waits['env'][1]:g}", flush=True)
    out = {}
    for clock, k in (("wall", 0), ("cpu", 1)):
        steps = {side: [t for run in runs[side] for t in run[k]] for side in runs}
        per_run = {side: [_common.median(run[k]) for run in runs[side]] for side in runs}
        ratio = _common.median(steps["env"]) / _common.median(steps["plain"])
        run_ratios = [e / p for e, p in zip(per_run["env"], per_run["plain"])]
        print(f"[{name}] {clock} time per step, median of {len(steps['plain'])} plain / {len(steps['env'])} env "
              f"steps: plain GRPOTrainer {_common.median(steps['plain']):.4f} s "
              f"{_common.spread(per_run['plain'], '{:.4f}')}, EnvGRPOTrainer {_common.median(steps['env']):.4f} s "
              f"{_common.spread(per_run['env'], '{:.4f}')}; ratio env/plain {ratio:.3f} "
              f"(per run {', '.join(f'{x:.3f}' for x in run_ratios)})")
        out[clock] = ratio
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
    parser.add_argument("--handicap", default=None, metavar="SIDE:MS", help="busy-wait MS ms in each step of SIDE "
                                                                              "(plain or env): a self-check")
    args = parser.parse_args(argv)
    _common.setup_torch(args.threads, args.seed)
    handicap: dict[str, float] = {}
    if args.handicap:
        side, ms = args.handicap.split(":")
        if side not in ("plain", "env"):
            parser.error(f"--handicap side must be plain or env, got {side!r}")
        handicap[side] = float(ms) / 1000
    print(f"timed: each optimizer step (on_step_begin..on_step_end), wall and process CPU time, {args.repeats} "
          f"alternating runs per side, first {args.warmup} steps of each run left out; torch threads {args.threads}"
          + (f"; handicap {args.handicap} ms" if handicap else ""))
    tiny_path = args.model_path or build_tiny_model()
    targets = _common.Targets()
    results = {}
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        if name == "tiny":
            ratios = measure("tiny", tiny_path, args, args.max_tokens, handicap)
        elif name == "wide":
            with tempfile.TemporaryDirectory() as wide_dir:
                wide_args = argparse.Namespace(**{**vars(args), "steps": args.wide_steps,
                                                  "warmup": min(args.warmup, args.wide_steps - 1)})
                ratios = measure("wide", build_wide_model(tiny_path, wide_dir), wide_args, args.wide_max_tokens,
                                 handicap)
        else:
            parser.error(f"unknown model {name!r} (tiny, wide)")
        results[name] = ratios
        for clock in ("cpu", "wall"):
            targets.add(f"[{name}] ratio env/plain of median {clock} step time {ratios[clock]:.3f} <= "
                        f"{TARGETS[name]:.2f}", ratios[clock] <= TARGETS[name])
    targets.finish(args.check)
    return results


if __name__ == "__main__":
    main()
