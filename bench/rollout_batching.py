"""Rollout batching on ``guess_number``: one generation call per turn, and almost all rollout time in the model.

What it measures: a batch of ``--groups`` x ``--group_size`` concurrent guess_number episodes (default 256 x 4 =
1,024, up to ``--max_turns`` 10 turns each, hidden numbers in 1..``--high`` so few episodes end early) played by the
offline tiny chat model through :class:`trl_envs.HFSampler` and :func:`trl_envs.run_rollout_batch`. Timed: the whole
``run_rollout_batch`` call (wall clock, event-loop entry and exit included) and, inside it, the sampler calls.

* generation calls per turn = ``num_sampler_calls / (most turns of any episode)``. Target: exactly 1.00 (every turn
  of every live episode goes to the model in ONE batched ``generate``).
* share of rollout wall time outside the model = ``(whole call - sampler_seconds) / whole call`` (env steps,
  rendering, the asyncio engine, the worker-thread hand-off, entering and leaving the event loop). Target: <= 5 %.
* memory flat across turns: after each sampler call (one per turn) the process's resident memory is read (after
  ``malloc_trim``, so freed memory is not counted); growth per turn = (RSS after the last turn - RSS after turn 2)
  / (turns - 2). Target: below a quarter of ONE turn's logits (episodes x max_tokens x vocab x 4 bytes), i.e. no
  turn's logits are retained. The episodes' own token lists grow a little each turn; that is counted too.
* episodes/s and sampled tokens/s (tokens the model sampled, per second of rollout wall time) for reference, and how
  much of the sampler's own time is spent outside ``model.generate`` (padding, per-row stop checks, logprobs).

Run: ``python bench/rollout_batching.py [--groups 256 --group_size 4 --max_turns 10 --max_tokens 8 --repeats 2]``;
``--check`` exits 1 when a target is missed. The summary is the median of the measured runs (after ``--warmup``).
``--tiny``: 2 x 2 episodes, 3 turns, one run. ``--slow_env_ms MS`` busy-waits MS ms in every env step (a self-check:
the outside-model share must rise).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import functools
import time

import _common


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=256, help="env groups (distinct hidden numbers)")
    parser.add_argument("--group_size", type=int, default=4, help="episodes per group")
    parser.add_argument("--max_turns", type=int, default=10, help="RolloutBudget.max_turns (guess_number max_guesses)")
    parser.add_argument("--high", type=int, default=1000, help="hidden numbers are drawn from 1..high")
    parser.add_argument("--max_tokens", type=int, default=8, help="RolloutBudget.max_tokens_per_turn")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--model_path", default=None, help="default: the tiny model from trl_envs.tiny_model")
    parser.add_argument("--max_outside_share", type=float, default=0.05, help="target for the outside-model share")
    parser.add_argument("--slow_env_ms", type=float, default=0.0, help="busy-wait this long in every env step")
    parser.add_argument("--tiny", action="store_true", help="2 x 2 episodes, 3 turns, one run, no warm-up")
    _common.add_common_args(parser, repeats=2, warmup=0)
    args = parser.parse_args(argv)
    if args.tiny:
        args.groups, args.group_size, args.max_turns, args.repeats, args.warmup = 2, 2, 3, 1, 0
    return args


_libc = ctypes.CDLL(ctypes.util.find_library("c")) if ctypes.util.find_library("c") else None


def resident_bytes() -> int:
    """This process's resident memory now, after handing freed heap pages back to the OS (glibc ``malloc_trim``)."""
    if _libc is not None and hasattr(_libc, "malloc_trim"):
        _libc.malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


_PAGE = __import__("os").sysconf("SC_PAGE_SIZE")


class _MemoryPerTurn:
    """A Sampler wrapper that reads resident memory after each call (its own time is kept apart)."""

    def __init__(self, sampler):
        self.sampler, self.rss, self.seconds = sampler, [], 0.0

    def sample(self, requests):
        out = self.sampler.sample(requests)
        start = time.perf_counter()
        self.rss.append(resident_bytes())
        self.seconds += time.perf_counter() - start
        return out


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


def main(argv=None) -> dict:
    args = parse_args(argv)
    _common.setup_torch(args.threads, args.seed)
    from trl_envs import HFSampler, Renderer, RolloutBudget, run_rollout_batch
    from trl_envs.envs.guess_number import GuessNumberDataset

    _, tokenizer, model = _common.load_tiny_model(args.model_path)
    gen_timer = _GenerateTimer(model)
    renderer = Renderer(tokenizer)
    sampler = _MemoryPerTurn(HFSampler(model, tokenizer, temperature=args.temperature))
    logits_per_turn = args.groups * args.group_size * args.max_tokens * model.config.vocab_size * 4
    budget = RolloutBudget(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens)
    dataset = GuessNumberDataset(
        renderer,
        batch_size=args.groups,
        group_size=args.group_size,
        num_batches=args.warmup + args.repeats,
        high=args.high,
        max_guesses=args.max_turns,
        seed=args.seed,
    )
    n_episodes = args.groups * args.group_size
    print(
        f"guess_number: {args.groups} groups x {args.group_size} = {n_episodes} episodes, max_turns="
        f"{args.max_turns}, max_tokens_per_turn={args.max_tokens}, hidden numbers 1..{args.high}, torch threads="
        f"{args.threads}" + (f", env steps slowed by {args.slow_env_ms} ms" if args.slow_env_ms else "")
    )
    print(
        "timed: the whole run_rollout_batch call (wall) and the sampler calls inside it; memory: resident set after "
        "each turn's sampler call (after malloc_trim)"
    )

    runs = []
    for i in range(args.warmup + args.repeats):
        gen_timer.seconds, sampler.rss, sampler.seconds = 0.0, [], 0.0
        builders = _common.slow_env_steps(dataset.get_batch(i), args.slow_env_ms / 1000)
        result, outer_wall = _common.timed(lambda builders=builders: run_rollout_batch(builders, sampler, budget))
        trajectories = [t for g in result.groups if g is not None for t in g.trajectories]
        max_turns = max(len(t.transitions) for t in trajectories)
        turns = [len(t.transitions) for t in trajectories]
        tokens = sum(t.num_action_tokens for t in trajectories)
        rss = sampler.rss
        growth = (rss[-1] - rss[1]) / (len(rss) - 2) if len(rss) > 2 else 0.0
        run = {
            "calls_per_turn": result.num_sampler_calls / max_turns,
            "outside_share": (outer_wall - result.sampler_seconds) / outer_wall,
            "growth_per_turn": growth,
            "full_turns": sum(t == args.max_turns for t in turns) / len(turns),
            "episodes_per_s": len(trajectories) / result.wall_seconds,
            "tokens_per_s": tokens / result.wall_seconds,
            "sampler_overhead_share": (result.sampler_seconds - gen_timer.seconds) / result.sampler_seconds,
            "outer_overhead_s": outer_wall - result.wall_seconds,
        }
        kind = "warmup" if i < args.warmup else "run"
        print(
            f"  {kind} {i}: wall {result.wall_seconds:.2f}s, sampler {result.sampler_seconds:.2f}s "
            f"(generate {gen_timer.seconds:.2f}s), sampler calls {result.num_sampler_calls}, batch sizes "
            f"{result.sampler_batch_sizes}, turns max {max_turns} mean {sum(turns) / len(turns):.2f}, "
            f"sampled tokens {tokens}, errors {result.error_counts or 'none'}; whole call {outer_wall:.2f}s; "
            "RSS per turn "
            f"(MB) {', '.join(f'{b / 2**20:.0f}' for b in rss)} (reading it took {sampler.seconds:.3f}s, counted as "
            "sampler time)"
        )
        if i >= args.warmup:
            runs.append(run)

    def med(key: str) -> float:
        return _common.median([r[key] for r in runs])

    def each(key: str, fmt: str) -> str:
        return _common.spread([r[key] for r in runs], fmt)

    worst_calls = max(r["calls_per_turn"] for r in runs)
    print()
    print(f"generation calls per turn: {worst_calls:.2f}   (worst run; target 1.00) {each('calls_per_turn', '{:.2f}')}")
    print(
        f"rollout time outside the model: {100 * med('outside_share'):.2f}%   (median; target <= "
        f"{100 * args.max_outside_share:.0f}%) {each('outside_share', '{:.4f}')}"
    )
    print(f"episodes/s: {med('episodes_per_s'):.2f}   {each('episodes_per_s', '{:.2f}')}")
    print(f"sampled tokens/s: {med('tokens_per_s'):.1f}   {each('tokens_per_s', '{:.1f}')}")
    print(
        f"sampler time outside model.generate (info): {100 * med('sampler_overhead_share'):.2f}%   "
        f"{each('sampler_overhead_share', '{:.4f}')}"
    )
    print(
        f"entering/leaving the event loop around the batch (info): {1000 * med('outer_overhead_s'):.1f} ms   "
        f"{each('outer_overhead_s', '{:.4f}')}"
    )
    print(f"episodes that played all {args.max_turns} turns: {100 * med('full_turns'):.0f}%")
    growth = max(r["growth_per_turn"] for r in runs)
    print(
        f"resident memory growth per turn: {growth / 2**20:.2f} MB   "
        f"(worst run; target < {logits_per_turn / 4 / 2**20:.1f} "
        f"MB = a quarter of one turn's logits, {logits_per_turn / 2**20:.1f} MB) "
        f"{_common.spread([r['growth_per_turn'] / 2**20 for r in runs], '{:.2f}')}"
    )

    targets = _common.Targets()
    targets.add(f"generation calls per turn == 1 (got {worst_calls:.2f})", abs(worst_calls - 1.0) < 1e-9)
    targets.add(
        f"outside-model share <= {100 * args.max_outside_share:.0f}% (got {100 * med('outside_share'):.2f}%)",
        med("outside_share") <= args.max_outside_share,
    )
    targets.add(
        f"memory flat across turns: growth per turn {growth / 2**20:.2f} MB < {logits_per_turn / 4 / 2**20:.1f} MB",
        growth < logits_per_turn / 4,
    )
    targets.finish(args.check)
    return {"outside_share": med("outside_share"), "growth_per_turn": growth, "calls_per_turn": worst_calls}


if __name__ == "__main__":
    main()
