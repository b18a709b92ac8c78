"""Agent endpoint overhead: an agent program behind the OpenAI-compatible endpoint vs the same task as a MessageEnv.

The task: ``What is a * b + c?`` with a calculator tool, rolled out on the same problems four ways:

* ``message_env``: the built-in ``tool_use`` env (a :class:`~trl_envs.core.message_env.MessageEnv`, no HTTP);
* ``raw agent``: the agent loop over a bare HTTP/1.1 keep-alive connection (asyncio streams, no client library):
  the endpoint's own cost, with next to nothing spent on the client's side;
* ``httpx agent``: the same loop with an ``httpx.AsyncClient`` per agent run;
* ``openai agent``: the built-in ``calculator_agent`` (an ``openai``-client loop).

All render the same prompt (the tools' system prompt + the question) and parse the same ``<tool_call>`` format, so
with the same sampler they play the same episodes. ``--groups`` x ``--group_size`` episodes (default 16 x 4 = 64
concurrent agents) per rollout, :func:`trl_envs.run_rollout_batch`. Each round runs every side once, rounds
interleaved (``--warmup`` unmeasured rounds, then ``--repeats``), with a garbage collection before each run:

1. **tiny model**: the offline tiny chat model through :class:`~trl_envs.HFSampler`, greedy (so all ways sample
   the same tokens whatever the order of the rows).
2. **scripted**: :class:`~trl_envs.samplers.text_policy.TextPolicySampler` that calls the calculator once, then
   answers (two calls per agent, no model).

Overhead = the time outside the sampler (env, endpoint and agent code), agent minus the MessageEnv of the same
round, as a share of that MessageEnv rollout and per call; the median over rounds, with every round's value. Timed
two ways: wall clock (``wall_seconds - sampler_seconds``) and process CPU time (``time.process_time`` around the
rollout minus the sampler calls' thread CPU time; torch runs single-threaded, everything else runs on the loop's
thread). On a dedicated machine the two agree; on a shared one the CPU figure is the steadier. The sampler's own
time is left out of the difference: all ways sample the same prompts.

Printed per line: wall ms (every round), sampler ms, ms outside it, CPU ms and CPU ms outside the sampler, generate
calls per wave (sampler calls / the longest episode's turns: 1.00 means every wave of concurrent calls went out as
one batch), valve flushes, calls, episodes done.
Targets: generate calls per wave = 1.00; endpoint overhead (the raw agent, CPU) <= 5% of the tiny-model rollout;
all agents complete. The httpx and openai agents are checked against the same 5% and printed: the endpoint plus that
client library's own per-request cost. ``--check`` exits 1 on a miss.

    python bench/agent_endpoint.py --repeats 5 --out bench/results/agent_endpoint.json
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import _common
import httpx  # noqa: E402
import torch  # noqa: E402

from trl_envs import HFSampler, Renderer, RolloutBudget, run_rollout_batch  # noqa: E402
from trl_envs.agents import AgentDataset  # noqa: E402
from trl_envs.core.tools import CALCULATOR  # noqa: E402
from trl_envs.envs.calculator_agent import make_tasks  # noqa: E402
from trl_envs.registry.names import make_env_dataset  # noqa: E402
from trl_envs.rollout.event_loop import run_sync  # noqa: E402
from trl_envs.samplers.text_policy import TextPolicySampler  # noqa: E402


def calculator_policy(prompt: str) -> str:
    turn = prompt.rsplit("<|im_start|>", 2)[-2].split("<|im_end|>")[0]
    if turn.startswith("tool"):
        return turn.split("\n", 1)[1]
    expression = turn.split("\n", 1)[1].removeprefix("What is ").rstrip("?")
    call = {"name": "calculator", "arguments": {"expression": expression}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


SLOW_AGENT_S = 0.0


async def httpx_agent(base_url: str, api_key: str, task: dict) -> float:
    """The calculator agent over plain HTTP (no client library): what the endpoint alone costs."""
    tools = [CALCULATOR.schema()]
    async with httpx.AsyncClient(
        base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, verify=False, trust_env=False, timeout=600
    ) as client:
        messages = [{"role": "user", "content": task["question"]}]
        for _ in range(task["max_tool_calls"] + 1):
            r = await client.post("/chat/completions", json={"model": "p", "messages": messages, "tools": tools})
            _common.busy_wait(SLOW_AGENT_S)
            message = r.json()["choices"][0]["message"]
            if not message.get("tool_calls"):
                return float((message["content"] or "").strip() == str(task["answer"]))
            messages.append(message)
            for call in message["tool_calls"]:
                args = json.loads(call["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": CALCULATOR.fn(**args)})
    return 0.0


async def raw_agent(base_url: str, api_key: str, task: dict) -> float:
    """The calculator agent over a bare HTTP/1.1 keep-alive connection (asyncio streams, no client library): what
    the endpoint alone costs, with next to nothing spent on the client's side."""
    import asyncio
    from urllib.parse import urlsplit

    url = urlsplit(base_url)
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    head = (
        f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\nAuthorization: Bearer {api_key}\r\n"
        "Content-Type: application/json\r\nContent-Length: "
    ).encode()
    tools = [CALCULATOR.schema()]
    try:
        messages = [{"role": "user", "content": task["question"]}]
        for _ in range(task["max_tool_calls"] + 1):
            body = json.dumps({"model": "p", "messages": messages, "tools": tools}).encode()
            writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
            headers = await reader.readuntil(b"\r\n\r\n")
            length = int(headers.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            message = json.loads(await reader.readexactly(length))["choices"][0]["message"]
            _common.busy_wait(SLOW_AGENT_S)
            if not message.get("tool_calls"):
                return float((message["content"] or "").strip() == str(task["answer"]))
            messages.append(message)
            for call in message["tool_calls"]:
                args = json.loads(call["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": CALCULATOR.fn(**args)})
    finally:
        writer.close()
    return 0.0


AGENTS = {"httpx_agent": httpx_agent, "raw_agent": raw_agent}


_DATASETS: dict = {}


def builders(env: str, renderer: Renderer, args) -> list:
    """A fresh batch of ``env``'s first batch of groups; the dataset is made once per side and reused across runs,
    as a trainer does."""
    key = (env, id(renderer), args.groups, args.group_size, args.seed)
    if key not in _DATASETS:
        if env in AGENTS:
            tasks = make_tasks(1, args.groups, args.seed, "mul_add", 30, 4)
            _DATASETS[key] = AgentDataset(
                AGENTS[env], tasks, renderer, batch_size=args.groups, group_size=args.group_size
            )
        else:
            _DATASETS[key] = run_sync(
                make_env_dataset(
                    env,
                    renderer,
                    group_size=args.group_size,
                    groups_per_batch=args.groups,
                    num_batches=2,
                    defaults={"seed": args.seed},
                )
            )[0]
    return list(_DATASETS[key].get_batch(0))


class _CPUTimed:
    """The bench's sampler wrapper: adds the CPU time of its calls (this thread's; torch runs single-threaded here)."""

    def __init__(self, sampler):
        self.sampler, self.cpu = sampler, 0.0

    def sample(self, requests):
        start = time.thread_time()
        try:
            return self.sampler.sample(requests)
        finally:
            self.cpu += time.thread_time() - start


def run_once(env: str, renderer: Renderer, sampler_factory, args) -> dict:
    """One rollout of ``env``: wall and process CPU time, inside and outside the sampler."""
    torch.manual_seed(args.seed)
    sampler = _CPUTimed(sampler_factory())
    built = builders(env, renderer, args)
    gc.collect()  # garbage left by the previous run is collected here, not inside whichever side runs next
    cpu = time.process_time()
    result = run_rollout_batch(built, sampler, RolloutBudget(max_turns=6, max_tokens_per_turn=args.max_tokens))
    cpu = time.process_time() - cpu
    trajectories = [t for g in result.groups if g is not None for t in g.trajectories]
    return {
        "wall": result.wall_seconds,
        "sampler": result.sampler_seconds,
        "outside": result.wall_seconds - result.sampler_seconds,
        "cpu": cpu,
        "cpu_outside": cpu - sampler.cpu,
        "calls_per_wave": result.num_sampler_calls / max(len(t.transitions) for t in trajectories),
        "valve": result.num_valve_flushes,
        "turns": sum(len(t.transitions) for t in trajectories),
        "done": sum(t.stop_reason == "done" for t in trajectories),
        "episodes": len(trajectories),
    }


def show(label: str, runs: list[dict]) -> None:
    r = runs[-1]
    med = {k: statistics.median(x[k] for x in runs) for k in ("wall", "sampler", "outside", "cpu", "cpu_outside")}
    print(
        f"  {label:<12} wall {med['wall'] * 1e3:8.1f} ms {_common.spread([x['wall'] * 1e3 for x in runs], '{:.1f}')}"
        f"  sampler {med['sampler'] * 1e3:7.1f} ms  outside it {med['outside'] * 1e3:6.1f} ms"
        f"  CPU {med['cpu'] * 1e3:7.1f} ms, outside the sampler {med['cpu_outside'] * 1e3:6.1f} ms"
        f"  generate calls/wave {r['calls_per_wave']:.2f}"
        f"  valve flushes {r['valve']}  calls {r['turns']}  done {r['done']}/{r['episodes']}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    _common.add_common_args(parser, repeats=5, warmup=1)
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--group_size", type=int, default=4)
    parser.add_argument("--max_tokens", type=int, default=96)
    parser.add_argument("--model_path", default=None, help="the tiny model's directory (default: build or load it)")
    parser.add_argument(
        "--slow_agent_ms",
        type=float,
        default=0.0,
        help="make the raw and httpx agents burn this much CPU time per call (a check of the bench itself)",
    )
    parser.add_argument(
        "--out", default=None, help="write the results here as JSON (e.g. bench/results/agent_endpoint.json)"
    )
    args = parser.parse_args(argv)
    global SLOW_AGENT_S
    SLOW_AGENT_S = args.slow_agent_ms / 1e3
    _common.setup_torch(args.threads, args.seed)
    path, tokenizer, model = _common.load_tiny_model(args.model_path)
    renderer = Renderer(tokenizer)
    episodes = args.groups * args.group_size
    print(
        f"agent endpoint vs MessageEnv: {episodes} concurrent episodes ({args.groups} groups x {args.group_size}), "
        f"model {path}, median of {args.repeats} runs after {args.warmup} warm-up, {args.threads} torch thread(s)"
    )
    targets = _common.Targets()

    print("1. tiny model, greedy (HFSampler)")
    hf = lambda: HFSampler(model, tokenizer, temperature=0.0)  # noqa: E731
    tiny = compare(renderer, hf, args)

    print("2. scripted sampler (one calculator call, then the answer; no model)")
    scripted = compare(renderer, lambda: TextPolicySampler(renderer, calculator_policy), args)

    agents = [r for side in (tiny, scripted) for label, r in side.items() if label != "message_env"]
    targets.add("generate calls per wave = 1.00 (agents)", all(r["calls_per_wave"] == 1.0 for r in agents))
    raw = tiny["raw agent"]
    targets.add(
        "endpoint overhead (raw-HTTP agent) <= 5% of the tiny-model rollout: CPU "
        f"{raw['overhead_cpu_share'] * 100:.1f}%, wall {raw['overhead_share'] * 100:.1f}%",
        raw["overhead_cpu_share"] <= 0.05,
    )
    for label in ("httpx agent", "openai agent"):
        r = tiny[label]
        targets.add(
            f"{label} (the endpoint + the client library's own cost) <= 5% of the tiny-model rollout: CPU "
            f"{r['overhead_cpu_share'] * 100:.1f}%, wall {r['overhead_share'] * 100:.1f}%",
            r["overhead_cpu_share"] <= 0.05,
        )
    targets.add(f"{episodes} concurrent agents complete", all(r["done"] == episodes for r in agents))
    result = {
        "command": "python bench/agent_endpoint.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "tiny": tiny,
        "scripted": scripted,
        "targets": dict(targets.results),
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"written: {args.out}")
    targets.finish(args.check)
    return result


SIDES = {
    "message_env": "tool_use",
    "raw agent": "raw_agent",
    "httpx agent": "httpx_agent",
    "openai agent": "calculator_agent",
}


def compare(renderer: Renderer, sampler_factory, args) -> dict[str, dict]:
    """Every side once per round, rounds interleaved (the machine's load drifts alike for all); then the overheads
    against the MessageEnv of the same round, as medians with every round's value."""
    runs: dict[str, list[dict]] = {label: [] for label in SIDES}
    for i in range(args.warmup + args.repeats):
        for label, env in SIDES.items():
            r = run_once(env, renderer, sampler_factory, args)
            if i >= args.warmup:
                runs[label].append(r)
    for label, side in runs.items():
        show(label, side)
    base = runs["message_env"]
    out = {"message_env": {"runs": base}}
    for label in list(SIDES)[1:]:
        side = runs[label]
        calls = side[-1]["turns"]
        share = [(a["outside"] - b["outside"]) / b["wall"] for a, b in zip(side, base)]
        cpu_share = [(a["cpu_outside"] - b["cpu_outside"]) / b["cpu"] for a, b in zip(side, base)]
        per_call = [(a["outside"] - b["outside"]) / calls for a, b in zip(side, base)]
        cpu_per_call = [(a["cpu_outside"] - b["cpu_outside"]) / calls for a, b in zip(side, base)]
        out[label] = {
            "runs": side,
            "overhead_share": statistics.median(share),
            "overhead_cpu_share": statistics.median(cpu_share),
            "overhead_per_call": statistics.median(per_call),
            "overhead_cpu_per_call": statistics.median(cpu_per_call),
            "calls_per_wave": max(r["calls_per_wave"] for r in side),
            "done": min(r["done"] for r in side),
            "same_episodes": calls == base[-1]["turns"],
        }
        print(
            f"  {label}: wall {statistics.median(share) * 100:+.1f}% of the MessageEnv rollout "
            f"{_common.spread([x * 100 for x in share], '{:+.1f}%')}, {statistics.median(per_call) * 1e3:+.2f} ms per "
            f"call; CPU {statistics.median(cpu_share) * 100:+.1f}% "
            f"{_common.spread([x * 100 for x in cpu_share], '{:+.1f}%')}, "
            f"{statistics.median(cpu_per_call) * 1e3:+.2f} ms per call ({calls} calls; same episodes as the "
            f"MessageEnv: {calls == base[-1]['turns']})"
        )
    return out


if __name__ == "__main__":
    main()
