"""Does training with trl_envs make the demo model better? Before / after on held-out problems, per env, >= 3 seeds.

Each row trains the demo model ``tiny-chat-v5`` (``trl_envs.tiny_model``, shipped with the package) with the
row's recipe, ``scripts/configs/<row>.yaml`` (the very file ``python scripts/train_grpo.py --config`` reads; for the
DPO rows ``scripts/train_dpo.py --config``, whose parser and ``make_trainer`` they use), once per seed, and evaluates
it before and after training on the env's *test* set:

* sampled at temperature 1 (``pass@1`` = the fraction of episodes solved, the row's metric);
* greedy (temperature 0), which must never get worse.

The arithmetic recipes (``arithmetic``, ``judged_arithmetic``, both DPO rows) hold out a fixed 20% of the 100 questions
(``held_out_fraction: 0.2``): the test set is made only of questions that never occur in training (the warm start saw
every question, answered quickly and sloppily or worked out, see ``scripts/tiny_models/warm_start.py``); offline DPO's
preference data asks only the other questions. ``guess_number`` has nothing to hold out (16 hidden numbers, every one
met in training): its test set is games drawn with the env's test seed, its pass@1 is the win rate within 6 guesses, and
its side metric, guesses per game (sampled), must fall as well. Prints one line per seed, then per row the mean ± std
(over seeds) before and after, and MET / NOT MET against the targets of issue 14. Rows without a recipe that reaches
them print NOT RUN with the reason.

    python bench/learning.py                                  # every row, seeds 0 1 2
    python bench/learning.py --rows arithmetic --seeds 0      # one row, one seed
    python bench/learning.py --check                          # exit 1 unless every row run is MET
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _common  # noqa: F401  (offline settings, quiet warnings)
import torch  # noqa: E402
import yaml  # noqa: E402
from transformers import AutoTokenizer, PrinterCallback  # noqa: E402

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, HFSampler, Renderer  # noqa: E402
from trl_envs.registry import parse_env_kwargs  # noqa: E402
from trl_envs.registry.names import make_env_dataset  # noqa: E402
from trl_envs.rollout.engine import RolloutBudget  # noqa: E402
from trl_envs.rollout.evaluation import evaluate  # noqa: E402
from trl_envs.rollout.event_loop import run_sync  # noqa: E402
from trl_envs.tiny_model import DEMO_MODEL_NAME, build_tiny_model  # noqa: E402
from trl_envs.training_data.preference_data import HELD_OUT_FRACTION  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import train_dpo  # noqa: E402  (scripts/train_dpo.py: the DPO rows train exactly as it does)

SCRIPT_KEYS = {"tiny_model", "env_name", "env_kwargs", "groups_per_batch", "num_env_batches", "card_eval"}


@dataclass(frozen=True)
class Scores:
    sampled: float  # pass@1 at temperature 1
    greedy: float
    side: float | None = None  # the row's side metric (e.g. guesses per game), sampled at temperature 1


@dataclass(frozen=True)
class Row:
    """One line of the table: a recipe, the env metric that counts an episode as solved, and the target."""

    name: str
    config: str  # path under scripts/configs/
    solved_metric: str  # env metric (mean over episodes) read as pass@1
    target: str
    met: Callable[[list[Scores], list[Scores]], bool]
    algorithm: str = "grpo"  # the recipe's script: scripts/train_grpo.py or scripts/train_dpo.py ("dpo")
    side_metric: str | None = None  # another env metric printed (and maybe judged) next to pass@1
    max_eval_batches: int | None = None  # at most this many test batches: the env holds out no more distinct problems


def _arithmetic_met(before: list[Scores], after: list[Scores]) -> bool:
    mean = statistics.fmean
    return (
        mean(s.sampled for s in before) <= 0.4
        and mean(s.sampled for s in after) >= 0.8
        and all(a.greedy >= b.greedy for a, b in zip(after, before))
    )


def _clear_gain(before: list[Scores], after: list[Scores]) -> bool:
    """The mean sampled score rises by at least 3x the larger std over seeds (before or after)."""
    if len(before) < 2:
        return False  # a std needs >= 2 seeds
    noise = max(statistics.stdev(s.sampled for s in before), statistics.stdev(s.sampled for s in after))
    gain = statistics.fmean(s.sampled for s in after) - statistics.fmean(s.sampled for s in before)
    return gain > 0 and gain >= 3 * noise


def _guess_number_met(before: list[Scores], after: list[Scores]) -> bool:
    mean = statistics.fmean
    return mean(s.sampled for s in after) >= 0.9 and mean(s.side for s in after) < mean(s.side for s in before)


ROWS = {
    "arithmetic": Row(
        "arithmetic",
        "arithmetic.yaml",
        "correct",
        "held-out pass@1 >= 0.8 from <= 0.4; greedy never lower than before",
        _arithmetic_met,
    ),
    "judged_arithmetic": Row(
        "judged_arithmetic",
        "judged_arithmetic.yaml",
        "correct",
        "held-out gain >= 3x the std over seeds (>= 2 seeds)",
        _clear_gain,
    ),
    "dpo_env": Row(
        "dpo_env",
        "dpo_env_arithmetic.yaml",
        "correct",
        "held-out gain >= 3x the std over seeds (>= 2 seeds)",
        _clear_gain,
        "dpo",
    ),
    "guess_number": Row(
        "guess_number",
        "guess_number.yaml",
        "win",
        "win rate >= 0.9 and fewer guesses than the base model",
        _guess_number_met,
        side_metric="guesses",
    ),
    "dpo_offline": Row(
        "dpo_offline",
        "dpo_offline_arithmetic.yaml",
        "correct",
        "held-out gain >= 3x the std over seeds (>= 2 seeds)",
        _clear_gain,
        "dpo",
    ),
    # needs reasoning-gym (pip install 'trl-envs[reasoning-gym]'); questions never trained on, see the recipe
    "reasoning_gym": Row(
        "reasoning_gym",
        "reasoning_gym_basic_arithmetic.yaml",
        "correct",
        "held-out gain >= 3x the std over seeds (>= 2 seeds)",
        _clear_gain,
        max_eval_batches=5,  # 40 problems: one-digit sums leave ~57 questions outside the training split's 40 entries
    ),
    "calculator_agent": Row(
        "calculator_agent",
        "calculator_agent.yaml",
        "correct",
        "held-out gain >= 3x the std over seeds (>= 2 seeds)",
        _clear_gain,
        side_metric="used_tool",
    ),
}
NOT_RUN = {  # row: (target, why no recipe is run)
    "tic_tac_toe": (
        "win rate vs random >= 0.7, illegal moves <= 2%",
        "random legal games in the warm start did not teach legal moves; best try 0.582, bench/results/history.md",
    ),
    "tool_use": (
        "correct answers >= 0.5 on large sums through calculator calls",
        "the 2-layer demo model did not learn to copy a tool's result in its warm start (bench/results/history.md)",
    ),
    "cartpole": (
        "greedy return >= 475 over 10 episodes",
        "best demo-model try 39.4 greedy (legal replies in the warm start); bench/results/history.md",
    ),
}


def load_recipe(row: Row, path: str | None = None) -> tuple[dict, dict]:
    """``(script options, EnvGRPOConfig options)`` of the row's YAML recipe (or of the YAML file ``path``)."""
    options = yaml.safe_load(Path(path or REPO / "scripts" / "configs" / row.config).read_text())
    script = {k: v for k, v in options.items() if k in SCRIPT_KEYS}
    fields = {f.name for f in dataclasses.fields(EnvGRPOConfig)}
    unknown = set(options) - SCRIPT_KEYS - fields
    if unknown:
        raise SystemExit(f"bench/learning.py: {row.config}: unknown keys {sorted(unknown)}")
    return script, {k: v for k, v in options.items() if k in fields}


def score(model, tokenizer, test, row: Row, env: str, budget: RolloutBudget, seed: int) -> Scores:
    out, side = [], None
    for temperature in (1.0, 0.0):
        torch.manual_seed(1000 + seed)
        metrics = evaluate(HFSampler(model, tokenizer, temperature=temperature), test, budget=budget).metrics
        out.append(metrics[f"env/{env}/{row.solved_metric}"])
        if row.side_metric and temperature == 1.0:
            side = metrics[f"env/{env}/{row.side_metric}"]
    return Scores(*out, side)


def test_set(
    env: str, env_kwargs: dict, tokenizer, group_size: int, groups_per_batch: int, seed: int, eval_batches: int
):
    """``(training builder, test set)`` of the env; the test set has ``eval_batches`` batches."""
    builder = make_env_dataset(
        env,
        Renderer(tokenizer),
        group_size=group_size,
        groups_per_batch=groups_per_batch,
        num_batches=1000,
        defaults={"seed": seed, "num_test_batches": eval_batches},
        **env_kwargs,
    )
    return builder, run_sync(builder)[1]


def before_after(
    trainer, tokenizer, test, row: Row, env: str, budget: RolloutBudget, seed: int
) -> tuple[Scores, Scores, float]:
    before = score(trainer.model, tokenizer, test, row, env, budget, seed)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    return before, score(trainer.model, tokenizer, test, row, env, budget, seed), seconds


def run_seed(
    row: Row, seed: int, model_path: str, tokenizer, eval_batches: int, config_path: str | None = None
) -> tuple[Scores, Scores, float]:
    if row.algorithm == "dpo":
        return run_dpo_seed(row, seed, model_path, tokenizer, eval_batches, config_path)
    script, config = load_recipe(row, config_path)
    env = script["env_name"]
    builder, test = test_set(
        env,
        script.get("env_kwargs") or {},
        tokenizer,
        config["num_generations"],
        script.get("groups_per_batch", 4),
        seed,
        eval_batches,
    )
    budget = RolloutBudget(
        max_turns=config.get("max_turns", 8), max_tokens_per_turn=config.get("max_completion_length", 16)
    )
    with tempfile.TemporaryDirectory() as out:
        args = EnvGRPOConfig(
            **{
                **config,
                "output_dir": out,
                "seed": seed,
                "use_cpu": True,
                "bf16": False,
                "report_to": "none",
                "save_strategy": "no",
                "disable_tqdm": True,
                "logging_steps": config["max_steps"],
                "gradient_checkpointing": False,
            }
        )
        trainer = EnvGRPOTrainer(model_path, args, builder, processing_class=tokenizer)
        trainer.remove_callback(PrinterCallback)
        return before_after(trainer, tokenizer, test, row, env, budget, seed)


def run_dpo_seed(
    row: Row, seed: int, model_path: str, tokenizer, eval_batches: int, config_path: str | None = None
) -> tuple[Scores, Scores, float]:
    """A DPO row: the recipe read and trained by scripts/train_dpo.py's own parser and ``make_trainer``. Tested on the
    env's test set (env-driven) or, offline, on the arithmetic questions the built-in preference data holds out."""
    with tempfile.TemporaryDirectory() as out:
        script, args, model_args, _ = train_dpo.make_parser().parse_args_and_config(
            [
                "--config",
                config_path or str(REPO / "scripts" / "configs" / row.config),
                "--output_dir",
                out,
                "--model_name_or_path",
                model_path,
                "--seed",
                str(seed),
                "--use_cpu",
                "true",
                "--bf16",
                "false",
                "--report_to",
                "none",
                "--save_strategy",
                "no",
                "--eval_strategy",
                "no",
                "--eval_envs_each_round",
                "false",
            ]
        )
        env, env_kwargs = (
            (script.env_name, parse_env_kwargs(script.env_kwargs))
            if script.env_mode
            else ("arithmetic", {"max_operand": 9, "held_out_fraction": HELD_OUT_FRACTION})
        )
        _, test = test_set(env, env_kwargs, tokenizer, args.group_size, args.groups_per_round, seed, eval_batches)
        trainer, _, _ = train_dpo.make_trainer(script, args, model_args)
        budget = RolloutBudget(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens_per_turn)
        return before_after(trainer, tokenizer, test, row, env, budget, seed)


def _mean_std(values: list[float]) -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {std:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="+", default=list(ROWS) + list(NOT_RUN), choices=list(ROWS) + list(NOT_RUN))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--eval_batches",
        type=int,
        default=10,
        help="test batches (x the recipe's groups_per_batch x num_generations episodes)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: a shared 2-core box)")
    parser.add_argument("--model", default=None, help=f"model path (default: the offline {DEMO_MODEL_NAME})")
    parser.add_argument("--config", default=None, help="a YAML recipe to use instead of the row's (one row only)")
    parser.add_argument("--check", action="store_true", help="exit 1 unless every row run is MET")
    args = parser.parse_args()

    if args.config and len(args.rows) != 1:
        parser.error("--config replaces one row's recipe: give exactly one --rows")
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    model_path = args.model or build_tiny_model(name=DEMO_MODEL_NAME)
    print(
        f"model {model_path} (ready in {time.perf_counter() - start:.0f} s); seeds {args.seeds}; "
        f"{args.eval_batches} test batches; {args.threads} torch thread(s)",
        flush=True,
    )
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    all_met = True
    summary = []
    for name in args.rows:
        if name in NOT_RUN:
            target, why = NOT_RUN[name]
            summary.append(f"{name:18s} NOT RUN   target: {target} ({why})")
            continue
        row = ROWS[name]
        before, after = [], []
        eval_batches = min(args.eval_batches, row.max_eval_batches or args.eval_batches)
        if eval_batches != args.eval_batches:
            print(f"{name:18s} {eval_batches} test batches: the env holds out no more distinct problems")
        for seed in args.seeds:
            b, a, seconds = run_seed(row, seed, model_path, tokenizer, eval_batches, args.config)
            before.append(b)
            after.append(a)
            side = f"   {row.side_metric} {b.side:.2f} -> {a.side:.2f}" if row.side_metric else ""
            print(
                f"{name:18s} seed {seed}: pass@1 {b.sampled:.3f} -> {a.sampled:.3f}   greedy {b.greedy:.3f} -> "
                f"{a.greedy:.3f}{side}   ({seconds:.0f} s training)",
                flush=True,
            )
        met = row.met(before, after)
        all_met &= met
        summary.append(
            f"{name:18s} {'MET' if met else 'NOT MET':8s}  pass@1 {_mean_std([s.sampled for s in before])}"
            f" -> {_mean_std([s.sampled for s in after])}   greedy "
            f"{_mean_std([s.greedy for s in before])} -> {_mean_std([s.greedy for s in after])}   "
            + (
                f"{row.side_metric} {_mean_std([s.side for s in before])} -> {_mean_std([s.side for s in after])}   "
                if row.side_metric
                else ""
            )
            + f"({len(args.seeds)} seeds; target: {row.target})"
        )
    print("\n".join(["", "row                result    before -> after (mean ± std over seeds)", *summary]))
    print(f"total {time.perf_counter() - start:.0f} s")
    return 0 if all_met or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
