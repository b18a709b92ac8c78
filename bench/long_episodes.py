"""Long episodes: 200-turn games, and the share of time spent outside the model, training rows included.

What it measures: ``--groups`` x ``--group_size`` guess_number episodes of exactly ``--turns`` turns (hidden number in
1..10^9, so nobody wins early) played by the offline tiny chat model (``HFSampler``, ``run_rollout_batch``), then
every trajectory turned into its training row (``trajectory_to_data``, with the token-exact check). Timed (wall):
the whole ``run_rollout_batch`` call, the sampler calls inside it, and the ``trajectory_to_data`` calls.

* outside-model share = (whole rollout call - sampler time + row building) / (whole rollout call + row building).
  Target: <= 5 %.
* scaling of the token-exact check (info and target): ``trajectory_to_data`` on synthetic episodes of ``--turns``
  and 2 x ``--turns`` turns of ``--synthetic_tokens_per_turn`` tokens each (200 turns x 150 = 30k tokens), best of
  5; ratio = time(2T) / time(T): about 2 when linear in episode length, about 4 when quadratic. Target: < 3.

    python bench/long_episodes.py [--turns 200 --groups 2 --group_size 2 --repeats 2]
    python bench/long_episodes.py --tiny          # 20 turns, one run
``--slow_env_ms MS`` busy-waits MS ms in every env step (a self-check: the share must rise).
"""

from __future__ import annotations

import argparse
import time

import _common


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group_size", type=int, default=2)
    parser.add_argument("--max_tokens", type=int, default=6, help="max sampled tokens per turn")
    parser.add_argument("--synthetic_tokens_per_turn", type=int, default=150)
    parser.add_argument("--max_outside_share", type=float, default=0.05)
    parser.add_argument("--slow_env_ms", type=float, default=0.0)
    parser.add_argument("--model_path", default=None)
    parser.add_argument("--tiny", action="store_true", help="20 turns, 2 x 1 episodes, one run")
    _common.add_common_args(parser, repeats=2, warmup=0)
    args = parser.parse_args(argv)
    if args.tiny:
        args.turns, args.groups, args.group_size, args.repeats, args.warmup = 20, 2, 1, 1, 0
    return args


def synthetic_trajectory(turns: int, tokens_per_turn: int):
    """An extending trajectory: each observation = previous observation + action + new env tokens."""
    from trl_envs.core.types import TokensWithLogprobs, Trajectory, Transition

    action_len = max(1, tokens_per_turn // 3)
    ob, transitions = list(range(1000, 1000 + tokens_per_turn)), []
    for turn in range(turns):
        action = TokensWithLogprobs([2000 + (turn + k) % 500 for k in range(action_len)], [-0.5] * action_len)
        transitions.append(Transition(ob, action, 0.0, turn == turns - 1))
        ob = ob + action.tokens + [3000 + (turn + k) % 500 for k in range(tokens_per_turn - action_len)]
    return Trajectory(transitions, final_ob=ob)


def best_time(fn, n: int = 5) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None) -> dict:
    args = parse_args(argv)
    _common.setup_torch(args.threads, args.seed)
    from trl_envs import HFSampler, Renderer, RolloutBudget, run_rollout_batch
    from trl_envs.envs.guess_number import GuessNumberGroupBuilder
    from trl_envs.training_data.rows import trajectory_to_data

    _, tokenizer, model = _common.load_tiny_model(args.model_path)
    renderer = Renderer(tokenizer)
    sampler = HFSampler(model, tokenizer, temperature=1.0)
    budget = RolloutBudget(max_turns=args.turns, max_tokens_per_turn=args.max_tokens)
    print(
        f"guess_number: {args.groups} x {args.group_size} episodes of {args.turns} turns, max_tokens_per_turn="
        f"{args.max_tokens}, torch threads {args.threads}"
        + (f", env steps slowed by {args.slow_env_ms} ms" if args.slow_env_ms else "")
    )
    print(
        "timed (wall): the whole run_rollout_batch call, the sampler calls inside it, trajectory_to_data of every "
        "trajectory"
    )
    runs = []
    for i in range(args.warmup + args.repeats):
        builders = [
            GuessNumberGroupBuilder(renderer, 123_456_789 + g, args.group_size, 1, 10**9, args.turns)
            for g in range(args.groups)
        ]
        builders = _common.slow_env_steps(builders, args.slow_env_ms / 1000)
        result, rollout_s = _common.timed(lambda builders=builders: run_rollout_batch(builders, sampler, budget))
        trajectories = [t for g in result.groups for t in g.trajectories]
        _, rows_s = _common.timed(lambda trajectories=trajectories: [trajectory_to_data(t) for t in trajectories])
        turns = [len(t.transitions) for t in trajectories]
        context = max(len(t.transitions[-1].ob) for t in trajectories)
        share = (rollout_s - result.sampler_seconds + rows_s) / (rollout_s + rows_s)
        print(
            f"  {'warmup' if i < args.warmup else 'run'} {i}: rollout {rollout_s:.2f}s, "
            f"sampler {result.sampler_seconds:.2f}s "
            f"({result.num_sampler_calls} calls), rows {1000 * rows_s:.1f} ms, turns {min(turns)}..{max(turns)}, "
            f"longest last context {context} tokens, outside-model share {100 * share:.2f}%"
        )
        if i >= args.warmup:
            runs.append({"share": share, "rows_s": rows_s})

    t1 = (
        best_time(lambda: trajectory_to_data(short), 5)
        if (short := synthetic_trajectory(args.turns, args.synthetic_tokens_per_turn))
        else 0.0
    )
    long = synthetic_trajectory(2 * args.turns, args.synthetic_tokens_per_turn)
    t2 = best_time(lambda: trajectory_to_data(long), 5)
    scaling = t2 / t1
    share = _common.median([r["share"] for r in runs])
    print()
    print(
        f"outside-model share: {100 * share:.2f}%   (median; target <= {100 * args.max_outside_share:.0f}%) "
        f"{_common.spread([100 * r['share'] for r in runs], '{:.2f}')}"
    )
    print(
        f"trajectory_to_data, synthetic episodes (best of 5): {args.turns} turns / "
        f"{len(short.transitions[-1].ob)} tokens {1000 * t1:.2f} ms; {2 * args.turns} turns / "
        f"{len(long.transitions[-1].ob)} tokens {1000 * t2:.2f} ms; ratio {scaling:.2f} (linear ~2, quadratic ~4)"
    )
    targets = _common.Targets()
    targets.add(
        f"outside-model share {100 * share:.2f}% <= {100 * args.max_outside_share:.0f}%",
        share <= args.max_outside_share,
    )
    targets.add(f"token-exact check linear in episode length: time(2T)/time(T) = {scaling:.2f} < 3", scaling < 3)
    targets.finish(args.check)
    return {"outside_share": share, "scaling": scaling}


if __name__ == "__main__":
    main()
