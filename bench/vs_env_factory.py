"""trl_envs vs TRL 1.16's own ``environment_factory`` tool loop: generation-side throughput on ``guess_number``.

What it measures: sampled (model) tokens per second of the whole generation-and-scoring part of one GRPO step, for
the same game, the same tiny model, the same budgets, on both sides. Timed on both sides: the whole
``_generate_and_score_completions(inputs)`` call (wall clock) on a batch of ``--groups`` x ``--group_size`` rows --
rollouts, rewards, advantages and the old-logprob pass alike. (Timing only ``_generate`` would be wrong:
``EnvGRPOTrainer`` rolls its episodes out before TRL calls ``_generate``, which then only hands back finished rows.)

* TRL: ``GRPOTrainer(environment_factory=GuessNumberToolEnv)``, an env class whose ``reset(target=...)`` returns the
  intro text and whose public method ``guess(number: int) -> str`` is the tool ("Higher." / "Lower." / "Correct!").
  TRL's multi-turn tool loop runs one ``generate`` per turn for the rows that called the tool. Model tokens =
  ``sum(tool_mask)`` of what ``_generate`` returned (tool-result tokens are 0 in TRL's mask).
* trl_envs: ``EnvGRPOTrainer`` on ``GuessNumberDataset`` (``run_rollout_batch`` with an ``HFSampler``); model
  tokens = ``sum(env_mask)``.

Budgets: same episodes (16 groups x 4, same hidden numbers), at most ``--max_turns`` model turns per episode (TRL:
``max_tool_calling_iterations = max_turns - 1``), at most ``--max_tokens`` tokens per turn (TRL:
``generation_kwargs={"max_new_tokens": ...}``; its ``max_completion_length``, which caps a whole multi-turn completion
tool tokens included, is set high enough never to bind), temperature 1, ``beta=0``, CPU, float32.

Why TRL needs a different chat template here (the tiny model cannot run TRL's tool loop as shipped): its ChatML
template has no tool-calling format, and ``GRPOTrainer`` refuses it at construction ("The provided chat template does
not support tool calling ..."; the script prints the exact error). The closest TRL-native setup is used instead: a
copy of the tiny tokenizer gets (1) a ChatML chat template that also renders assistant ``tool_calls`` and renders a
``tool`` message as a user turn, and (2) a transformers ``response_template`` under which a bare-integer reply
(``7<|im_end|>``) parses as the tool call ``guess(number=7)``. So TRL's loop produces token-for-token the same
conversation format as trl_envs' guess_number (the tool result "Lower." appears as ``<|im_start|>user\\nLower.``), and
the same warm-started model plays both. A Qwen2.5-style ``<tool_call>{json}</tool_call>`` template would also be
accepted by TRL, but the tiny model never emits ``<tool_call>``, so every TRL episode would stop after one turn.

Workload difference that TRL cannot express: its episodes cannot be ended by the env, so a TRL episode keeps guessing
after "Correct!" until ``max_turns`` (or until a reply is not a tool call), while guess_number ends on the right
guess. Besides the headline (guess_number as shipped), the script therefore also runs a "matched" trl_envs variant
whose env likewise plays on after a correct guess and ends on a non-number reply (``--no_matched`` skips it).

Target: tokens/s ratio trl_envs / TRL >= ``--min_ratio`` (default 1.0) for the headline. ``--check`` exits 1 on a miss.
``--handicap SIDE:MS`` (SIDE ``trl`` or ``env``) burns MS ms of CPU time inside each timed call of one side (a
self-check that the ratio is computed from the timed calls). ``--tiny``: 2 groups x 2, 2 turns, 1 run, no warm-up, no
matched.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence

import _common

GUESS_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' and message.get('tool_calls') %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- for call in message['tool_calls'] %}"
    "{{- call['function']['name'] + ' ' + (call['function']['arguments'] | tojson) }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""ChatML as the tiny model's template renders it, plus: a ``tool`` message renders as a user turn (the env's reply),
and an assistant message with ``tool_calls`` renders them as ``name {json}`` (TRL only renders that for its template
checks and to find the tool-result suffix; the model's own sampled tokens are what the conversation carries)."""

GUESS_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open_pattern": r"(?=\s*-?\d+\s*<\|im_end\|>)",
            "close_pattern": r"<\|im_end\|>\s*",
            "repeats": True,
            "content": "text",
            "transform": {"type": "function", "function": {"name": "guess", "arguments": {"number": "{content}"}}},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}
"""transformers ``response_template``: a reply that is a bare integer is the tool call ``guess(number=<it>)``."""


class GuessNumberToolEnv:
    """guess_number for TRL's ``environment_factory``: ``reset`` gives the intro, ``guess`` is the tool."""

    def __init__(self, low: int = 1, high: int = 16):
        self.low, self.high = low, high
        self.target: int | None = None
        self.won = False

    def reset(self, target=None, **kwargs) -> str:
        self.target, self.won = int(target), False
        return f"Guess my number between {self.low} and {self.high}."

    def guess(self, number: int) -> str:
        """Guess the hidden number.

        Args:
            number: The guess.

        Returns:
            "Higher." or "Lower." when wrong, "Correct!" when right.
        """
        if number == self.target:
            self.won = True
            return "Correct!"
        return "Higher." if number < self.target else "Lower."

    def get_reward(self) -> float:
        return 1.0 if self.won else 0.0


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group_size", type=int, default=4)
    parser.add_argument("--max_turns", type=int, default=6)
    parser.add_argument("--max_tokens", type=int, default=8, help="max sampled tokens per turn")
    parser.add_argument("--min_ratio", type=float, default=1.0, help="target for trl_envs/TRL tokens per second")
    parser.add_argument("--no_matched", action="store_true", help="skip the matched-workload trl_envs variant")
    parser.add_argument("--model_path", default=None)
    parser.add_argument(
        "--handicap",
        default=None,
        metavar="SIDE:MS",
        help="busy-wait MS ms in each timed call of SIDE (trl or env): a self-check",
    )
    parser.add_argument("--tiny", action="store_true", help="2 groups x 2, 2 turns, 1 run, no warm-up, no matched")
    _common.add_common_args(parser, repeats=5)
    args = parser.parse_args(argv)
    if args.tiny:
        args.groups, args.group_size, args.max_turns, args.repeats, args.warmup = 2, 2, 2, 1, 0
        args.no_matched = True
    args.handicap_s = {"trl": 0.0, "env": 0.0}
    if args.handicap:
        side, ms = args.handicap.split(":")
        if side not in args.handicap_s:
            parser.error(f"--handicap side must be trl or env, got {side!r}")
        args.handicap_s[side] = float(ms) / 1000
    return args


def _matched_dataset(renderer, groups: int, group_size: int, max_turns: int, seed: int):
    """guess_number whose episodes play on after a correct guess and end on a non-number reply, like TRL's loop."""
    from trl_envs.envs.guess_number import (
        GuessNumberDataset,
        GuessNumberEnv,
        GuessNumberGroupBuilder,
        MessageStepResult,
        MessageTokenEnv,
    )

    class PlayOnGuessNumberEnv(GuessNumberEnv):
        async def step(self, response):
            self.guesses += 1
            text = response.message["content"].strip()
            if not (text.lstrip("-").isdigit() and response.ok):
                return MessageStepResult(0.0, True, [])
            guess = int(text)
            reply = "Correct!" if guess == self.target else ("Higher." if guess < self.target else "Lower.")
            return MessageStepResult(0.0, self.guesses >= self.max_guesses, [{"role": "user", "content": reply}])

    class PlayOnBuilder(GuessNumberGroupBuilder):
        async def make_envs(self):
            return [
                MessageTokenEnv(PlayOnGuessNumberEnv(self.target, self.low, self.high, self.max_guesses), self.renderer)
                for _ in range(self.group_size)
            ]

    class PlayOnDataset(GuessNumberDataset):
        def get_batch(self, index: int):
            return [
                PlayOnBuilder(b.renderer, b.target, b.group_size, b.low, b.high, b.max_guesses)
                for b in super().get_batch(index)
            ]

    return PlayOnDataset(renderer, groups, group_size, 1, max_guesses=max_turns, seed=seed)


class Side:
    def __init__(self, name: str, trainer, inputs: list[dict], handicap_s: float = 0.0):
        self.name, self.trainer, self.inputs, self.handicap_s = name, trainer, inputs, handicap_s
        self.runs: list[dict] = []

    def run_once(self, measured: bool) -> dict:
        from trl_envs.trainers import trl_seam

        self.trainer.model.train()  # as in a training step (generation switches modes itself)
        start = time.perf_counter()
        _common.busy_wait(self.handicap_s)  # --handicap: CPU time burnt inside the timed call
        batch = trl_seam.score_generation_batch(self.trainer, self.inputs)
        step_seconds = time.perf_counter() - start
        # model tokens: TRL's tool_mask (1 = sampled, 0 = tool / env tokens) on the unpadded completion
        masks = [m[c.bool()].tolist() for m, c in zip(batch["tool_mask"], batch["completion_mask"])]
        model_tokens = sum(sum(m) for m in masks)
        turns = [_count_turns(m) for m in masks]
        run = {
            "step_s": step_seconds,
            "tokens": model_tokens,
            "tokens_per_s": model_tokens / step_seconds,
            "episodes": len(masks),
            "mean_turns": sum(turns) / len(turns),
            "max_turns": max(turns),
        }
        print(
            f"  {self.name:<28} {'run   ' if measured else 'warmup'}: _generate_and_score_completions "
            f"{step_seconds:.3f}s, {run['episodes']} episodes, model tokens {model_tokens}, turns/episode mean "
            f"{run['mean_turns']:.2f} max {run['max_turns']}, {run['tokens_per_s']:.1f} tok/s"
        )
        if measured:
            self.runs.append(run)
        return run

    def median(self, key: str) -> float:
        return _common.median([r[key] for r in self.runs])


def _count_turns(mask: Sequence[int]) -> int:
    """Model turns in a completion = runs of 1s in its model-token mask."""
    turns, prev = 0, 0
    for m in mask:
        if m and not prev:
            turns += 1
        prev = m
    return turns


def _grpo_kwargs(args, output_dir: str, n_rows: int) -> dict:
    return dict(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        max_steps=1,
        num_generations=args.group_size,
        per_device_train_batch_size=n_rows,
        gradient_accumulation_steps=1,
        beta=0.0,
        temperature=1.0,
        save_strategy="no",
        logging_strategy="no",
        seed=args.seed,
        disable_tqdm=True,
    )


def main(argv=None) -> dict:
    args = parse_args(argv)
    _common.setup_torch(args.threads, args.seed)
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, Renderer
    from trl_envs.envs.guess_number import GuessNumberDataset

    path, tokenizer, _ = _common.load_tiny_model(args.model_path)
    renderer = Renderer(tokenizer)
    n_rows = args.groups * args.group_size
    dataset = GuessNumberDataset(renderer, args.groups, args.group_size, 1, max_guesses=args.max_turns, seed=args.seed)
    targets = [b.target for b in dataset.get_batch(0)]
    out_dir = tempfile.mkdtemp(prefix="bench-vs-env-factory-")
    print(
        f"guess_number: {args.groups} groups x {args.group_size} = {n_rows} episodes, max_turns={args.max_turns}, "
        f"max_tokens_per_turn={args.max_tokens}, torch threads={args.threads}"
    )
    print(
        f"timed on both sides: the whole _generate_and_score_completions call (wall clock), {args.warmup} warm-up + "
        f"{args.repeats} measured runs, interleaved; tokens/s = model tokens / that time"
        + (f"; handicap {args.handicap} ms" if args.handicap else "")
    )

    # -- TRL: first show why the stock tiny tokenizer cannot run environment_factory -----------------------------------
    trl_dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]] * args.groups, "target": targets})
    longest_reply = max(
        (renderer.render_suffix([{"role": "user", "content": r}]) for r in ("Higher.", "Lower.", "Correct!")), key=len
    )
    max_completion = args.max_turns * (args.max_tokens + len(longest_reply) + 1)
    trl_config = GRPOConfig(
        **_grpo_kwargs(args, out_dir, n_rows),
        max_completion_length=max_completion,
        max_tool_calling_iterations=args.max_turns - 1,
        generation_kwargs={"max_new_tokens": args.max_tokens},
    )
    stock_error = None
    try:
        GRPOTrainer(
            model=path,
            args=trl_config,
            train_dataset=trl_dataset,
            processing_class=tokenizer,
            environment_factory=GuessNumberToolEnv,
        )
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        stock_error = f"{type(e).__name__}: {e}"
    print(
        f"TRL environment_factory with the stock tiny tokenizer: "
        f"{'refused -- ' + stock_error if stock_error else 'accepted'}"
    )

    tool_tokenizer = type(tokenizer).from_pretrained(path)
    tool_tokenizer.chat_template = GUESS_CHAT_TEMPLATE
    tool_tokenizer.response_template = GUESS_RESPONSE_TEMPLATE
    trl_trainer = GRPOTrainer(
        model=path,
        args=trl_config,
        train_dataset=trl_dataset,
        processing_class=tool_tokenizer,
        environment_factory=GuessNumberToolEnv,
    )
    print(
        f"TRL environment_factory with the tool-capable template copy: accepted (max_completion_length="
        f"{max_completion}, max_tool_calling_iterations={args.max_turns - 1}, max_new_tokens={args.max_tokens}; "
        f"TRL swapped the template for a training one: {trl_trainer.chat_template is not None})"
    )
    trl_inputs = [
        {"prompt": [{"role": "user", "content": ""}], "target": t} for t in targets for _ in range(args.group_size)
    ]

    # -- trl_envs -------------------------------------------------------------------------------------------------
    def env_trainer(env_dataset):
        config = EnvGRPOConfig(
            **_grpo_kwargs(args, out_dir, n_rows),
            max_completion_length=args.max_tokens,
            max_turns=args.max_turns,
            max_tokens_per_turn=args.max_tokens,
        )
        return EnvGRPOTrainer(path, config, env_dataset, processing_class=tokenizer)

    env_inputs = [{"prompt": f"train/0/{k}"} for k in range(args.groups) for _ in range(args.group_size)]
    sides = [
        Side("TRL environment_factory", trl_trainer, trl_inputs, args.handicap_s["trl"]),
        Side("trl_envs EnvGRPOTrainer", env_trainer(dataset), env_inputs, args.handicap_s["env"]),
    ]
    if not args.no_matched:
        matched = _matched_dataset(renderer, args.groups, args.group_size, args.max_turns, args.seed)
        sides.append(Side("trl_envs (matched workload)", env_trainer(matched), env_inputs))

    torch.set_num_threads(max(1, args.threads))  # trainers may touch it; measure every side with the same setting
    for i in range(args.warmup + args.repeats):  # interleaved, so machine noise hits every side alike
        for side in sides:
            side.run_once(measured=i >= args.warmup)

    trl_side, env_side = sides[0], sides[1]
    ratio = env_side.median("tokens_per_s") / trl_side.median("tokens_per_s")
    print()
    for side in sides:
        print(
            f"{side.name} model tokens/s: {side.median('tokens_per_s'):.1f}   (median; per run ~"
            f"{side.median('tokens'):.0f} model tokens, {side.median('mean_turns'):.2f} turns/episode) "
            f"{_common.spread([r['tokens_per_s'] for r in side.runs], '{:.1f}')}"
        )
    print(
        f"tokens/s ratio trl_envs/TRL (whole _generate_and_score_completions): {ratio:.2f}   "
        f"(target >= {args.min_ratio:.2f})"
    )
    if not args.no_matched:
        matched_ratio = sides[2].median("tokens_per_s") / trl_side.median("tokens_per_s")
        print(f"tokens/s ratio trl_envs/TRL, matched workload (info): {matched_ratio:.2f}")
    print(
        f"whole _generate_and_score_completions per batch of {n_rows} episodes (median): TRL "
        f"{trl_side.median('step_s'):.3f}s {_common.spread([r['step_s'] for r in trl_side.runs])}; trl_envs "
        f"{env_side.median('step_s'):.3f}s {_common.spread([r['step_s'] for r in env_side.runs])}   (info: TRL "
        f"episodes play all {args.max_turns} turns, see the docstring)"
    )

    shutil.rmtree(out_dir, ignore_errors=True)
    checks = _common.Targets()
    checks.add(f"trl_envs/TRL tokens/s >= {args.min_ratio:.2f} (got {ratio:.2f})", ratio >= args.min_ratio)
    checks.finish(args.check)
    return {"ratio": ratio, "trl_step_s": trl_side.median("step_s"), "env_step_s": env_side.median("step_s")}


if __name__ == "__main__":
    main()
