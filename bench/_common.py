"""Helpers shared by the benchmark scripts in ``bench/`` (offline settings, the tiny model, CPU threads, summaries).

Not a benchmark itself. The scripts import it as ``_common`` (``python bench/NAME.py`` puts ``bench/`` on the path).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence

for _key, _value in (
    ("HF_HUB_OFFLINE", "1"),
    ("HF_HUB_DISABLE_TELEMETRY", "1"),
    ("TRL_EXPERIMENTAL_SILENCE", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
):
    os.environ.setdefault(_key, _value)
warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 deprecation notices drown the numbers


def add_common_args(parser: argparse.ArgumentParser, *, repeats: int = 2, warmup: int = 1) -> None:
    parser.add_argument("--repeats", type=int, default=repeats, help="measured runs (the summary is their median)")
    parser.add_argument("--warmup", type=int, default=warmup, help="unmeasured runs first (one-time costs)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads. Default 1: on a small shared CPU box, multi-threaded kernels spin "
        "against other jobs and get 10-50x slower, which measures the neighbours, not the code",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="exit with status 1 when a target is missed")


def setup_torch(threads: int, seed: int) -> None:
    import torch
    from transformers import set_seed

    torch.set_num_threads(max(1, threads))
    random.seed(seed)
    set_seed(seed)


def load_tiny_model(model_path: str | None = None, *, retries: int = 5, wait_s: float = 60.0):
    """``(path, tokenizer, model)`` of the offline tiny chat model (``trl_envs.tiny_model.build_tiny_model``).

    The build may be in progress elsewhere when a bench starts; a failed build or load is retried a few times.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    last_error: Exception | None = None
    for attempt in range(retries):
        try:
            if model_path is None:
                from trl_envs.tiny_model import build_tiny_model

                path = build_tiny_model()
            else:
                path = model_path
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
            model.eval()
            return path, tokenizer, model
        except Exception as e:  # noqa: BLE001 - the tiny model may be mid-build; retry then give up loudly
            last_error = e
            print(
                f"[bench] loading the tiny model failed ({type(e).__name__}: {e}); retry {attempt + 1}/{retries} "
                f"in {wait_s:.0f}s",
                file=sys.stderr,
                flush=True,
            )
            time.sleep(wait_s)
    raise RuntimeError(f"could not load the tiny model after {retries} tries") from last_error


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float], fmt: str = "{:.3f}") -> str:
    """``"(runs: a, b, ...)"``: every measured value, for a summary line."""
    return f"(runs: {', '.join(fmt.format(v) for v in values)})"


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def busy_wait(seconds: float) -> None:
    """Burn ``seconds`` of this thread's CPU time (a deliberate, measurable slowdown for the benches' self-checks).

    CPU time, not wall time: on a loaded machine a wall-clock wait would burn less CPU than asked, and a self-check
    comparing CPU time would fail; this adds at least ``seconds`` to both clocks, whatever the load."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def slow_env_steps(builders, seconds: float):
    """``builders`` (EnvGroupBuilders), changed so that every env they make busy-waits ``seconds`` at each step."""
    if not seconds:
        return builders

    def slowed(step):
        async def step_(*args, **kwargs):
            busy_wait(seconds)
            return await step(*args, **kwargs)

        return step_

    for builder in builders:

        async def make_envs(make_envs=builder.make_envs):
            envs = list(await make_envs())
            for env in envs:
                env.step = slowed(env.step)
            return envs

        builder.make_envs = make_envs
    return builders


class Targets:
    """Collects target checks; ``finish(check)`` prints a verdict and exits 1 on a miss when ``check``."""

    def __init__(self) -> None:
        self.results: list[tuple[str, bool]] = []

    def add(self, description: str, ok: bool) -> None:
        self.results.append((description, ok))

    def finish(self, check: bool) -> None:
        print()
        for description, ok in self.results:
            print(f"target {'MET    ' if ok else 'NOT MET'}: {description}")
        missed = [d for d, ok in self.results if not ok]
        if missed and check:
            print(f"--check: {len(missed)} target(s) missed", file=sys.stderr)
            sys.exit(1)
