"""Rollout batching on ``guess_number``: one generation call per turn, and almost all rollout time in the model.

What it measures: a batch of ``--groups`` x ``--group_size`` guess_number episodes (default 16 x 4 = 64) played by
the offline tiny chat model through :class:`trl_envs.HFSampler` and :func:`trl_envs.run_rollout_batch`.

* generation calls per turn = ``num_sampler_calls / (most turns of any episode)``. Target: exactly 1.00 (every turn
  of every live episode goes to the model in ONE batched ``generate``).
* share of rollout wall time outside the model = ``(wall_seconds - sampler_seconds) / wall_seconds`` (env steps,
  rendering, the asyncio engine, the worker-thread hand-off). Target: <= 5 %.
* episodes/s and sampled tokens/s (tokens the model sampled, per second of rollout wall time) for reference, and how
  much of the sampler's own time is spent outside ``model.generate`` (padding, per-row stop checks, logprobs).

Run: ``python bench/rollout_batching.py [--groups 16 --group_size 4 --max_turns 6 --max_tokens 8 --repeats 5]``;
``--check`` exits 1 when a target is missed. The summary is the median of the measured runs (after ``--warmup``).
"""

from __future__ import annotations

import argparse
import functools
import time

import _common


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=16, help="env groups (distinct hidden numbers)")
    parser.add_argument("--group_size", type=int, default=4, help="episodes per group")
    parser.add_argument("--max_turns", type=int, default=6, help="RolloutBudget.max_turns (guess_number max_guesses)")
    parser.add_argument("--max_tokens", type=int, default=8, help="RolloutBudget.max_tokens_per_turn")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--model_path", default=None, help="default: the tiny model from trl_envs.tiny_model")
    parser.add_argument("--max_outside_share", type=float, default=0.05, help="target for the outside-model share")
    _common.add_common_args(parser, repeats=5)
    return parser.parse_args(argv)


class _GenerateTimer:
    """Wraps ``model.generate`` to add up the time spent inside it."""

    def __init__(self, model):
        self.seconds = 0.0
        self._generate = model.generate

        @functools.wraps(self._generate)
        def generate(*args, **kwargs):
            start = time.perf_counter()
            try:
                return self._generate(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        model.generate = generate


def main(argv=None) -> None:
    args = parse_args(argv)
    _common.setup_torch(args.threads, args.seed)
    from trl_envs import HFSampler, Renderer, RolloutBudget, run_rollout_batch
    from trl_envs.envs.guess_number import GuessNumberDataset

    _, tokenizer, model = _common.load_tiny_model(args.model_path)
    gen_timer = _GenerateTimer(model)
    renderer = Renderer(tokenizer)
    sampler = HFSampler(model, tokenizer, temperature=args.temperature)
    budget = RolloutBudget(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens)
    dataset = GuessNumberDataset(renderer, batch_size=args.groups, group_size=args.group_size,
                                 num_batches=args.warmup + args.repeats, max_guesses=args.max_turns, seed=args.seed)
    n_episodes = args.groups * args.group_size
    print(f"guess_number: {args.groups} groups x {args.group_size} = {n_episodes} episodes, max_turns="
          f"{args.max_turns}, max_tokens_per_turn={args.max_tokens}, torch threads={args.threads}")

    runs = []
    for i in range(args.warmup + args.repeats):
        gen_timer.seconds = 0.0
        builders = dataset.get_batch(i)
        result, outer_wall = _common.timed(lambda: run_rollout_batch(builders, sampler, budget))
        trajectories = [t for g in result.groups if g is not None for t in g.trajectories]
        max_turns = max(len(t.transitions) for t in trajectories)
        turns = [len(t.transitions) for t in trajectories]
        tokens = sum(t.num_action_tokens for t in trajectories)
        run = {
            "calls_per_turn": result.num_sampler_calls / max_turns,
            "outside_share": (result.wall_seconds - result.sampler_seconds) / result.wall_seconds,
            "episodes_per_s": len(trajectories) / result.wall_seconds,
            "tokens_per_s": tokens / result.wall_seconds,
            "sampler_overhead_share": (result.sampler_seconds - gen_timer.seconds) / result.sampler_seconds,
            "outer_overhead_s": outer_wall - result.wall_seconds,
        }
        kind = "warmup" if i < args.warmup else "run"
        print(f"  {kind} {i}: wall {result.wall_seconds:.2f}s, sampler {result.sampler_seconds:.2f}s "
              f"(generate {gen_timer.seconds:.2f}s), sampler calls {result.num_sampler_calls}, batch sizes "
              f"{result.sampler_batch_sizes}, turns max {max_turns} mean {sum(turns) / len(turns):.2f}, "
              f"sampled tokens {tokens}, errors {result.error_counts or 'none'}")
        if i >= args.warmup:
            runs.append(run)

    def med(key: str) -> float:
        return _common.median([r[key] for r in runs])

    def each(key: str, fmt: str) -> str:
        return _common.spread([r[key] for r in runs], fmt)

    worst_calls = max(r["calls_per_turn"] for r in runs)
    print()
    print(f"generation calls per turn: {worst_calls:.2f}   (worst run; target 1.00) {each('calls_per_turn', '{:.2f}')}")
    print(f"rollout time outside the model: {100 * med('outside_share'):.2f}%   (median; target <= "
          f"{100 * args.max_outside_share:.0f}%) {each('outside_share', '{:.4f}')}")
    print(f"episodes/s: {med('episodes_per_s'):.2f}   {each('episodes_per_s', '{:.2f}')}")
    print(f"sampled tokens/s: {med('tokens_per_s'):.1f}   {each('tokens_per_s', '{:.1f}')}")
    print(f"sampler time outside model.generate (info): {100 * med('sampler_overhead_share'):.2f}%   "
          f"{each('sampler_overhead_share', '{:.4f}')}")
    print(f"asyncio.run start/stop around the batch (info): {1000 * med('outer_overhead_s'):.1f} ms")

    targets = _common.Targets()
    targets.add(f"generation calls per turn == 1 (got {worst_calls:.2f})", abs(worst_calls - 1.0) < 1e-9)
    targets.add(f"outside-model share <= {100 * args.max_outside_share:.0f}% (got {100 * med('outside_share'):.2f}%)",
                med("outside_share") <= args.max_outside_share)
    targets.finish(args.check)


if __name__ == "__main__":
    main()
