"""Env latency: envs that wait on I/O must cost their latency once per turn, not once per episode.

What it measures: ``--groups`` x ``--group_size`` episodes (default 16 x 4 = 64) of a bench env whose ``step`` awaits
``asyncio.sleep(--latency)`` (default 0.1 s, simulated I/O: a tool call, a sandbox, a judge) and ends each episode
after ``--turns`` steps (default 5), rolled out with :func:`trl_envs.run_rollout_batch`.

* First with a stub sampler (returns a fixed two-token action at once), so the model is not what is measured.
* Then (unless ``--no_model``) once more with the real offline tiny chat model through :class:`trl_envs.HFSampler`,
  the env's observations rendered with :class:`trl_envs.Renderer`.

Printed per line: the rollout's total env wait = ``wall_seconds - sampler_seconds`` (everything that is not the
model: mostly the sleeps), the naive serial expectation ``episodes x turns x latency`` (64 x 5 x 0.1 = 32 s) and the
ideal ``turns x latency`` (5 x 0.1 = 0.5 s: every episode's sleep of one turn overlaps the others').

Target: env wait ~ ideal, i.e. ``env wait <= ideal x (1 + --tolerance)`` (default tolerance 0.2: <= 600 ms) on the
stub-sampler line. ``--check`` exits 1 on a miss. The tiny-model line is information only: its "env wait" also holds
the CPU work done outside the model (chat-template rendering of every observation, the engine), which
``bench/rollout_batching.py`` measures on its own.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

import _common

from trl_envs import (
    Env,
    EnvGroupBuilder,
    Renderer,
    RolloutBudget,
    SampleRequest,
    StepResult,
    TokensWithLogprobs,
    run_rollout_batch,
)


class SleepyEnv(Env):
    """Every step awaits ``latency`` seconds (simulated I/O), then asks for another turn; done after ``turns`` steps.

    With a renderer, observations are real chat conversations (so a real model can sample them); without one they are
    arbitrary token ids for a stub sampler.
    """

    def __init__(self, latency: float, turns: int, renderer: Renderer | None = None):
        self.latency, self.turns, self.renderer = latency, turns, renderer
        self.steps = 0
        self.ob: list[int] = []

    def _stop(self) -> list[int]:
        return self.renderer.get_stop_sequences() if self.renderer is not None else [StubSampler.STOP]

    async def initial_observation(self):
        if self.renderer is not None:
            self.ob = self.renderer.build_generation_prompt([{"role": "user", "content": "Say a number."}])
        else:
            self.ob = [1, 2, 3, 4]
        return self.ob, self._stop()

    async def step(self, action, *, extra: dict[str, Any] | None = None) -> StepResult:
        await asyncio.sleep(self.latency)
        self.steps += 1
        done = self.steps >= self.turns
        if done:
            self.ob = self.ob + list(action)
        elif self.renderer is not None:
            self.ob = self.renderer.extend_observation(self.ob, action, [{"role": "user", "content": "Another."}])
        else:
            self.ob = self.ob + list(action) + [5, 6]
        return StepResult(reward=0.0, episode_done=done, next_observation=self.ob, next_stop_condition=self._stop())


class SleepyGroupBuilder(EnvGroupBuilder):
    def __init__(self, group_size: int, latency: float, turns: int, renderer: Renderer | None = None):
        self.group_size, self.latency, self.turns, self.renderer = group_size, latency, turns, renderer

    async def make_envs(self) -> Sequence[Env]:
        return [SleepyEnv(self.latency, self.turns, self.renderer) for _ in range(self.group_size)]


class StubSampler:
    """A :class:`trl_envs.Sampler` that answers every request at once with ``[7, STOP]``."""

    STOP = 0

    def __init__(self) -> None:
        self.calls = 0

    def sample(self, requests: list[SampleRequest]) -> list[TokensWithLogprobs]:
        self.calls += 1
        return [TokensWithLogprobs([7, self.STOP], [0.0, 0.0], "stop") for _ in requests]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group_size", type=int, default=4)
    parser.add_argument("--turns", type=int, default=5, help="steps per episode")
    parser.add_argument("--latency", type=float, default=0.1, help="seconds each step awaits")
    parser.add_argument("--tolerance", type=float, default=0.2, help="allowed env wait above the ideal, relative")
    parser.add_argument("--max_tokens", type=int, default=8, help="max tokens per turn (tiny-model line)")
    parser.add_argument("--no_model", action="store_true", help="skip the tiny-model line")
    parser.add_argument("--model_path", default=None)
    _common.add_common_args(parser, repeats=3)
    return parser.parse_args(argv)


def measure(label: str, sampler, renderer: Renderer | None, args, runs: int) -> tuple[float, list[float]]:
    """Median env wait over the measured runs, and every measured value."""
    budget = RolloutBudget(max_turns=args.turns + 1, max_tokens_per_turn=args.max_tokens)
    waits = []
    for i in range(runs):
        builders = [SleepyGroupBuilder(args.group_size, args.latency, args.turns, renderer) for _ in range(args.groups)]
        result = run_rollout_batch(builders, sampler, budget)
        trajectories = [t for g in result.groups for t in g.trajectories]
        assert all(len(t.transitions) == args.turns for t in trajectories), "an episode did not run all its turns"
        wait = result.wall_seconds - result.sampler_seconds
        kind = "warmup" if i < args.warmup else "run"
        print(
            f"  {label} {kind} {i}: wall {result.wall_seconds:.3f}s, sampler {result.sampler_seconds:.3f}s, env wait "
            f"{wait:.3f}s, sampler calls {result.num_sampler_calls}"
        )
        if i >= args.warmup:
            waits.append(wait)
    return _common.median(waits), waits


def main(argv=None) -> dict:
    args = parse_args(argv)
    _common.setup_torch(args.threads, args.seed)
    n = args.groups * args.group_size
    serial = n * args.turns * args.latency
    ideal = args.turns * args.latency
    bound = ideal * (1 + args.tolerance)
    print(
        f"{args.groups} groups x {args.group_size} = {n} episodes x {args.turns} turns, step latency "
        f"{1000 * args.latency:.0f} ms"
    )
    print("timed: each whole run_rollout_batch (its wall_seconds) minus the time inside the sampler calls = env wait")

    stub_wait, stub_runs = measure("stub sampler", StubSampler(), None, args, args.warmup + args.repeats)
    model_line = None
    if not args.no_model:
        from trl_envs import HFSampler

        _, tokenizer, model = _common.load_tiny_model(args.model_path)
        renderer = Renderer(tokenizer)
        model_line = measure("tiny model", HFSampler(model, tokenizer), renderer, args, args.warmup + 1)

    print()
    print(f"env wait, stub sampler: {stub_wait:.3f} s   (median) {_common.spread(stub_runs)}")
    if model_line is not None:
        print(f"env wait, tiny model: {model_line[0]:.3f} s   {_common.spread(model_line[1])}")
    print(f"naive serial expectation ({n} x {args.turns} x {args.latency:g} s): {serial:.3f} s")
    print(f"ideal ({args.turns} x {args.latency:g} s): {ideal:.3f} s")
    print(f"env wait / ideal, stub sampler: {stub_wait / ideal:.2f}x")
    if model_line is not None:
        print(
            f"env wait / ideal, tiny model: {model_line[0] / ideal:.2f}x   (info: includes rendering and engine "
            "CPU time, see bench/rollout_batching.py)"
        )

    targets = _common.Targets()
    targets.add(
        f"env wait with stub sampler <= {bound:.3f} s (ideal + {100 * args.tolerance:.0f}%; got {stub_wait:.3f} s)",
        stub_wait <= bound,
    )
    targets.finish(args.check)
    return {"stub_wait": stub_wait, "ideal": ideal}


if __name__ == "__main__":
    main()
