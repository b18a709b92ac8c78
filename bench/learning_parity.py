"""Does EnvGRPOTrainer learn as well as plain TRL? GRPOTrainer + reward function vs EnvGRPOTrainer + env.

The same task (single-turn arithmetic, ``What is a + b?``), model, hyperparameters and problem sequence are trained
(a) by TRL's ``GRPOTrainer`` on a prompt dataset with a reward function equal to the env's reward (1 right, -0.1
when the reply is not a bare integer ending on the end-of-turn token) and (b) by ``EnvGRPOTrainer`` on the built-in
``arithmetic`` env. The problem sequence is the env dataset's training split for the seed (both trainers read it in
order, ``shuffle_dataset=False``); each seed is one pair of runs with that trainer seed.

Figures per run, all measured here:
* training reward: mean of the reward TRL logs at each step (over all steps);
* greedy accuracy: the trained model answers each evaluation problem once, greedily;
* sampled accuracy: ``--samples`` answers per evaluation problem at temperature 1.
Evaluation problems: every sum of the operand range (``--max_operand 3``: all 16, the range training draws from, so
not held out: this compares two trainers, it is not a generalisation figure), scored by this file's own
evaluator (``generate`` on the chat-template prompt; right = the reply is exactly the sum), not by the env.

Prints each run, then per figure the mean ± std over seeds of each side, the mean |Δ| over seed pairs and
MET / NOT MET against the target mean |Δ| <= 0.03.

    python bench/learning_parity.py                         # 3 seeds x 300 steps
    python bench/learning_parity.py --seeds 0 1 --steps 100
    python bench/learning_parity.py --plain_sequence_offset 100   # GRPOTrainer on other problems: the effect alone
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer, PrinterCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, Renderer  # noqa: E402
from trl_envs.envs.arithmetic import ArithmeticDatasetBuilder, question, read_answer  # noqa: E402
from trl_envs.rollout.event_loop import run_sync  # noqa: E402
from trl_envs.tiny_model import build_tiny_model  # noqa: E402

TARGET = 0.03
FIGURES = ("training reward", "greedy accuracy", "sampled accuracy")


def env_builder(renderer: Renderer, seed: int, args) -> ArithmeticDatasetBuilder:
    return ArithmeticDatasetBuilder(
        renderer,
        batch_size=args.groups_per_step,
        group_size=args.group_size,
        num_batches=args.steps,
        max_operand=args.max_operand,
        seed=seed,
    )


def problem_sequence(renderer: Renderer, seed: int, args) -> list[tuple[int, int]]:
    """The env dataset's training problems in the order EnvGRPOTrainer trains them."""
    train, _ = run_sync(env_builder(renderer, seed, args))
    return [(g.a, g.b) for i in range(len(train)) for g in train.get_batch(i)]


def make_reward(end_of_turn: int, format_coef: float = 0.1):
    """The arithmetic env's reward as a TRL reward function."""

    def arithmetic_reward(completions, completion_ids, answer, **kwargs):
        out = []
        for completion, ids, ans in zip(completions, completion_ids, answer):
            value = read_answer(completion[0]["content"])  # the env's own reading of an answer
            format_ok = value is not None and len(ids) > 0 and ids[-1] == end_of_turn
            out.append(format_coef * (float(format_ok) - 1.0) + float(value == ans))
        return out

    return arithmetic_reward


def common(out: str, seed: int, args) -> dict:
    return dict(
        output_dir=out,
        use_cpu=True,
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        disable_tqdm=True,
        seed=seed,
        num_generations=args.group_size,
        per_device_train_batch_size=args.group_size * args.groups_per_step,
        max_steps=args.steps,
        learning_rate=args.lr,
        beta=0.0,
        temperature=1.0,
        max_completion_length=args.max_tokens,
        logging_steps=1,
        save_strategy="no",
        shuffle_dataset=False,
    )


def train_plain(model_path, tokenizer, seed, args):
    renderer = Renderer(tokenizer)
    problems = problem_sequence(renderer, seed + args.plain_sequence_offset, args)
    data = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": question(a, b)}] for a, b in problems],
            "answer": [a + b for a, b in problems],
        }
    )
    out = tempfile.mkdtemp(prefix="parity-plain-")
    trainer = GRPOTrainer(
        model_path,
        reward_funcs=[make_reward(renderer.end_of_turn_token_id)],
        args=GRPOConfig(**common(out, seed, args)),
        train_dataset=data,
        processing_class=tokenizer,
    )
    return trainer


def train_env(model_path, tokenizer, seed, args):
    out = tempfile.mkdtemp(prefix="parity-env-")
    return EnvGRPOTrainer(
        model_path,
        EnvGRPOConfig(**common(out, seed, args), max_turns=1),
        env_builder(Renderer(tokenizer), seed, args),
        processing_class=tokenizer,
    )


@torch.no_grad()
def accuracy(model, tokenizer, max_operand: int, *, greedy: bool, samples: int, max_tokens: int, seed: int) -> float:
    """Fraction of right answers over every sum a + b with 0 <= a, b <= max_operand (``samples`` each)."""
    problems = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": question(a, b)}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for a, b in problems
    ]
    n = 1 if greedy else samples
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts for _ in range(n)])
    mask = (
        torch.arange(width)[None, :] >= torch.tensor([width - len(p) for p in prompts for _ in range(n)])[:, None]
    ).long()
    model.eval()
    torch.manual_seed(10_000 + seed)
    out = model.generate(
        input_ids=ids.to(model.device),
        attention_mask=mask.to(model.device),
        do_sample=not greedy,
        temperature=None if greedy else 1.0,
        top_p=None,
        top_k=None,
        max_new_tokens=max_tokens,
        pad_token_id=pad,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
    )
    replies = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    right = [reply.strip() == str(sum(problems[i // n])) for i, reply in enumerate(replies)]
    return sum(right) / len(right)


def run(side: str, model_path, tokenizer, seed, args) -> tuple[dict[str, float], list[float]]:
    torch.manual_seed(seed)
    trainer = (train_plain if side == "plain" else train_env)(model_path, tokenizer, seed, args)
    trainer.remove_callback(PrinterCallback)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    shutil.rmtree(trainer.args.output_dir, ignore_errors=True)  # nothing is saved there (save_strategy="no")
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    clipped = [h["completions/clipped_ratio"] for h in trainer.state.log_history if "completions/clipped_ratio" in h]
    model = trainer.model
    figures = {
        "training reward": statistics.fmean(rewards),
        "greedy accuracy": accuracy(
            model, tokenizer, args.max_operand, greedy=True, samples=1, max_tokens=args.max_tokens, seed=seed
        ),
        "sampled accuracy": accuracy(
            model,
            tokenizer,
            args.max_operand,
            greedy=False,
            samples=args.samples,
            max_tokens=args.max_tokens,
            seed=seed,
        ),
    }
    print(
        f"{side:5s} seed {seed}: "
        + "  ".join(f"{k} {v:.3f}" for k, v in figures.items())
        + f"  (first-10-step reward {statistics.fmean(rewards[:10]):.3f}, "
        f"last-50 {statistics.fmean(rewards[-50:]):.3f},"
        f" clipped {statistics.fmean(clipped):.3f}; {len(rewards)} steps in {seconds:.0f} s,"
        f" {seconds / max(len(rewards), 1):.2f} s/step)",
        flush=True,
    )
    return figures, rewards


def mean_std(values: list[float]) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {std:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--group_size", type=int, default=8)
    parser.add_argument("--groups_per_step", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max_tokens", type=int, default=16, help="max_completion_length")
    parser.add_argument("--max_operand", type=int, default=3, help="operands 0..N (3: the default run's 16 sums)")
    parser.add_argument("--samples", type=int, default=16, help="sampled answers per evaluation problem")
    parser.add_argument(
        "--plain_sequence_offset",
        type=int,
        default=0,
        help="give GRPOTrainer the problem sequence of seed + N instead (N != 0 shows what a "
        "different problem sequence alone does to the comparison)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default=None, help="model id or path (default: the offline tiny model)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every figure is at parity")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    model_path = args.model or build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    print(
        f"model {model_path}; seeds {args.seeds}; {args.steps} steps of {args.groups_per_step} groups x "
        f"{args.group_size}; lr {args.lr}; max_completion_length {args.max_tokens}; operands 0..{args.max_operand} "
        f"(evaluated on all {(args.max_operand + 1) ** 2} sums, greedy once and {args.samples} samples each at T=1); "
        "GRPOTrainer's problems: "
        + ("the same sequence" if not args.plain_sequence_offset else f"seed + {args.plain_sequence_offset} sequence"),
        flush=True,
    )
    results = {"plain": [], "env": []}
    for seed in args.seeds:  # alternate sides so drift on a shared machine hits both
        curves = {}
        for side in ("plain", "env"):
            figures, curves[side] = run(side, model_path, tokenizer, seed, args)
            results[side].append(figures)
        same = [abs(p - e) < 1e-6 for p, e in zip(curves["plain"], curves["env"])]
        first = same.index(False) if False in same else None
        print(
            f"seed {seed}: the logged reward is the same (|Δ| < 1e-6) at {sum(same)} of {len(same)} steps"
            + (f"; first difference at step {first + 1}" if first is not None else ""),
            flush=True,
        )
    all_met = True
    print(f"\n{'figure':18s} {'GRPOTrainer':>15s} {'EnvGRPOTrainer':>15s} {'mean |Δ|':>9s}  target <= {TARGET}")
    for fig in FIGURES:
        plain = [r[fig] for r in results["plain"]]
        env = [r[fig] for r in results["env"]]
        delta = statistics.fmean(abs(p - e) for p, e in zip(plain, env))
        met = delta <= TARGET
        all_met &= met
        print(f"{fig:18s} {mean_std(plain):>15s} {mean_std(env):>15s} {delta:9.3f}  {'MET' if met else 'NOT MET'}")
    return 1 if args.check and not all_met else 0


if __name__ == "__main__":
    sys.exit(main())
