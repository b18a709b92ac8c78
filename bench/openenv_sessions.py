"""OpenEnv sessions: what one env step through an OpenEnv server costs, and a rollout batch against one server.

What it measures, against tests/openenv_server.py (OpenEnv's own server API, uvicorn, in a subprocess on 127.0.0.1):

1. ``--steps`` (default 500) sequential ``step`` calls of one :class:`trl_envs.openenv.OpenEnvSession`: the round trip
   as env code sees it (a hop to the connections' I/O thread, the WebSocket request to the server and back). Printed:
   median and 90th percentile in ms.
2. A rollout batch of ``--groups`` x ``--group_size`` episodes (default 16 x 4 = 64, two turns each), env ``openenv``
   as the trainer builds it, played with a scripted sampler that answers at once (so the model is not what is
   measured): wall time, sessions opened, and the env side (wall - sampler time: every episode's connect, reset, two
   steps and close, overlapped).
3. The same batch with ``max_sessions=--max_sessions`` (default 8): episodes queue for a session.

Information only (no target): the numbers depend on the machine's load; the headline line is printed from the
measurements above.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from transformers import AutoTokenizer

from trl_envs import Renderer, RolloutBudget, run_rollout_batch
from trl_envs.openenv import OpenEnvDatasetBuilder, OpenEnvSession
from trl_envs.rollout.event_loop import run_sync
from trl_envs.samplers.text_policy import TextPolicySampler
from trl_envs.tiny_model import build_tiny_model

SERVER = Path(__file__).parents[1] / "tests" / "openenv_server.py"


def start_server() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "256"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    for line in proc.stdout:
        if match := re.match(r"PORT (\d+)", line):
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # drain its output
            return proc, f"http://127.0.0.1:{match[1]}"
    raise RuntimeError("the OpenEnv server did not start")


def sessions_made(url: str) -> int:
    with urllib.request.urlopen(f"{url}/test/sessions", timeout=30) as r:
        return json.loads(r.read())["made"]


async def step_round_trips(url: str, steps: int) -> list[float]:
    times = []
    async with OpenEnvSession(url) as session:
        await session.reset(seed=1)
        for _ in range(steps):
            start = time.perf_counter()
            await session.step({"message": "1"})  # the server's episode is over after 2 steps; it still answers
            times.append(time.perf_counter() - start)
    return times


def rollout(url: str, renderer: Renderer, groups: int, group_size: int, max_sessions: int | None) -> dict:
    builder = OpenEnvDatasetBuilder(
        renderer,
        url=url,
        group_size=group_size,
        batch_size=groups,
        num_batches=1,
        num_test_batches=0,
        max_sessions=max_sessions,
    )
    train, _ = run_sync(builder)
    sampler = TextPolicySampler(renderer, lambda prompt: re.findall(r"[Ss]ay (\d)\.", prompt)[-1])
    made = sessions_made(url)
    result = run_rollout_batch(train.get_batch(0), sampler, RolloutBudget(max_turns=4))
    rewards = [t.step_reward for g in result.groups for t in g.trajectories]
    return {
        "wall_s": result.wall_seconds,
        "env_s": result.wall_seconds - result.sampler_seconds,
        "sampler_calls": result.num_sampler_calls,
        "valve_flushes": result.num_valve_flushes,
        "sessions": sessions_made(url) - made,
        "mean_reward": statistics.mean(rewards),
        "episodes": len(rewards),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group_size", type=int, default=4)
    parser.add_argument("--max_sessions", type=int, default=8)
    args = parser.parse_args(argv)
    proc, url = start_server()
    try:
        renderer = Renderer(AutoTokenizer.from_pretrained(build_tiny_model()))
        times = asyncio.run(step_round_trips(url, args.steps))
        ms = sorted(t * 1000 for t in times)
        p50, p90 = statistics.median(ms), ms[int(0.9 * (len(ms) - 1))]
        print(
            f"step round trip over {args.steps} sequential steps of one session: median {p50:.2f} ms, p90 {p90:.2f} ms"
        )
        out = {"step_ms_median": p50, "step_ms_p90": p90}
        for label, limit in (("unlimited", None), (f"max_sessions={args.max_sessions}", args.max_sessions)):
            r = rollout(url, renderer, args.groups, args.group_size, limit)
            print(
                f"rollout batch, {label}: {r['episodes']} episodes x 2 turns in {r['wall_s']:.2f} s (env side "
                f"{r['env_s']:.2f} s), {r['sessions']} sessions, "
                f"{r['sampler_calls']} sampler calls, {r['valve_flushes']} valve flushes, mean reward "
                f"{r['mean_reward']:.2f}"
            )
            out[label] = r
        print(
            f"headline: one OpenEnv step costs {p50:.2f} ms (median) on this machine; {args.groups * args.group_size} "
            "concurrent 2-turn episodes (session opened, reset, 2 steps, closed) take "
            f"{out['unlimited']['env_s']:.2f} s "
            "of env time in all"
        )
        return out
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
