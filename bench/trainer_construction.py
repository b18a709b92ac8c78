"""How long building an ``EnvGRPOTrainer`` takes as the RLDataset grows (issue 16: construction must not depend on it).

    python bench/trainer_construction.py                      # 1k, 100k and 1M batches, 1 ms get_batch
    python bench/trainer_construction.py --batches 1000 1000000 --get_batch_ms 1

What is timed: ``EnvGRPOTrainer(model=<tiny model, loaded once before timing>, args=..., env_dataset=...)`` --
``time.perf_counter()`` around the constructor call only, one run per size (after one unmeasured warm-up run on the
smallest size, which pays the one-time imports). The dataset is an ``RLDataset`` of N batches of 4 arithmetic groups
(4 envs each) whose ``get_batch`` sleeps ``--get_batch_ms`` before building its batch, as a dataset that reads from
disk or a remote store would; the bench also counts the ``get_batch`` calls the constructor made. Peak RSS growth is
not measured.
"""

from __future__ import annotations

import argparse
import time

import _common  # noqa: F401  (offline settings)

from trl_envs.core.types import RLDataset


class SlowArithmeticDataset(RLDataset):
    """N batches of ``groups`` arithmetic groups; every ``get_batch`` call sleeps first and is counted."""

    def __init__(self, renderer, num_batches: int, groups: int, group_size: int, delay_s: float):
        from trl_envs.envs.arithmetic import ArithmeticDataset

        self.inner = ArithmeticDataset(renderer, groups, group_size, num_batches, max_operand=9, seed=0)
        self.delay_s, self.calls = delay_s, 0

    def get_batch(self, index: int):
        self.calls += 1
        time.sleep(self.delay_s)
        return self.inner.get_batch(index)

    def __len__(self) -> int:
        return len(self.inner)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1_000, 100_000, 1_000_000])
    parser.add_argument("--get_batch_ms", type=float, default=1.0)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, Renderer
    from trl_envs.tiny_model import build_tiny_model

    torch.set_num_threads(1)
    path = build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    renderer = Renderer(tokenizer)
    config = EnvGRPOConfig(
        output_dir="/tmp/trl_envs_bench_construction",
        use_cpu=True,
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        num_generations=4,
        per_device_train_batch_size=16,
        max_steps=1,
        save_strategy="no",
        beta=0.0,
    )

    def build(n: int) -> tuple[float, int]:
        dataset = SlowArithmeticDataset(renderer, n, groups=4, group_size=4, delay_s=args.get_batch_ms / 1000)
        start = time.perf_counter()
        EnvGRPOTrainer(model=model, args=config, env_dataset=dataset, processing_class=tokenizer)
        return time.perf_counter() - start, dataset.calls

    build(min(args.batches))  # warm-up: imports and first-use costs
    print(
        f"EnvGRPOTrainer construction, RLDataset of N batches x 4 groups, get_batch sleeps {args.get_batch_ms} ms "
        "(perf_counter around the constructor, 1 run each, after a warm-up)"
    )
    for n in args.batches:
        seconds, calls = build(n)
        print(f"  N = {n:>9,} batches ({4 * n:>9,} groups): {seconds:7.2f} s, {calls} get_batch calls", flush=True)


if __name__ == "__main__":
    main()
