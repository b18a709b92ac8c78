"""GPU runs of the accelerate configs and of vLLM, skipped without a GPU. scripts/gpu_check.sh runs them.

Each test launches tests/distributed_worker.py (the worker of tests/test_distributed.py) with ``--device cuda`` and
checks the same things as the CPU tests: every rank finished, whole groups per rank, rewards and advantages equal to a
single-process computation, env metrics over all ranks' episodes; with 2+ GPUs also the uneven-lengths lock-step.

* ``single_gpu.yaml`` + vLLM colocate: multi-turn guess_number with vLLM generating every turn; TRL's importance-
  sampling correction consumes our per-token vLLM logprobs (its ratio metrics are logged and finite, near 1).
* ``zero2.yaml`` (ZeRO-2), ``zero3.yaml`` (ZeRO-3), ``fsdp2.yaml`` (FSDP2): min(2, GPUs) processes; the ZeRO-2 run
  also trains with rollouts overlapping training (``max_staleness=1``, a sampler process per GPU).
* ``multi_gpu.yaml`` (DDP): 2+ GPUs.
* vLLM server mode (``trl vllm-serve`` on the last GPU, 2 training processes on the others): 3+ GPUs.

The tiny model is saved in bfloat16 for the vLLM runs (vLLM's attention kernels want half precision).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest
import torch
from distributed_checks import (
    check_async,
    check_groups_rewards_advantages_metrics,
    check_uneven,
    env_logs,
    run_worker,
    scenario,
)
from mp_launch import REPO, free_port, kill_tree, launch_env

NGPU = torch.cuda.device_count() if torch.cuda.is_available() else 0
NPROC = min(2, NGPU)
TIMEOUT_S = 420

pytestmark = [
    pytest.mark.skipif(NGPU == 0, reason="needs a GPU (scripts/gpu_check.sh on a GPU machine)"),
    pytest.mark.timeout(600),
]
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")
needs_2_gpus = pytest.mark.skipif(NGPU < 2, reason="needs 2 GPUs (one NCCL rank per GPU)")


@pytest.fixture(scope="module")
def bf16_model_path(tiny_model_path, tmp_path_factory) -> str:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tmp_path_factory.mktemp("tiny-bf16")
    AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.bfloat16).save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(path)
    return str(path)


def _launch(tmp_path, config: str, scenarios: list[str], nproc: int, model_path: str, *worker_args: str):
    ranks = run_worker(
        tmp_path,
        config,
        scenarios,
        world_size=nproc,
        model_path=model_path,
        timeout_s=TIMEOUT_S,
        launch_args=["--num_processes", str(nproc), "--mixed_precision", "no"],
        worker_args=["--device", "cuda", *worker_args],
    )
    print((tmp_path / "launch.log").read_text()[-3000:])
    return ranks


def _check(ranks: list[dict], name: str, expected_type: str, zero_stage: int | None = None) -> list[dict]:
    per_rank = scenario(ranks, name)
    assert all(s["device"].startswith("cuda") for s in per_rank)
    if len(per_rank) > 1 or expected_type in ("DEEPSPEED", "NO"):  # accelerate's type for 1-process FSDP/DDP varies
        assert all(s["distributed_type"] == expected_type for s in per_rank), [s["distributed_type"] for s in per_rank]
    if zero_stage is not None:
        assert all(s["zero_stage"] == zero_stage for s in per_rank)
    check_groups_rewards_advantages_metrics(per_rank)
    return per_rank


def _scenarios(nproc: int) -> list[str]:
    return ["guess_number:group"] + (["uneven:batch"] if nproc == 2 else [])


def _check_uneven_if_two(ranks, expected_type, zero_stage=None):
    if len(ranks) == 2:
        check_uneven(_check(ranks, "uneven_batch", expected_type, zero_stage))


def _check_importance_sampling(per_rank: list[dict]) -> None:
    for h in env_logs(per_rank):
        mean = h.get("sampling/importance_sampling_ratio/mean")
        assert mean is not None, "TRL logged no importance-sampling ratio: vLLM logprobs were not used"
        assert math.isfinite(mean) and 0.5 < mean < 2.0, f"importance-sampling ratio {mean}: logprobs misaligned?"


@needs_vllm
def test_gpu_vllm_colocate_multi_turn(tmp_path, bf16_model_path):
    ranks = _launch(tmp_path, "single_gpu.yaml", ["guess_number:group"], 1, bf16_model_path, "--vllm_mode", "colocate")
    per_rank = _check(ranks, "guess_number_group", "NO")
    assert all(s["use_vllm"] for s in per_rank)
    assert any(t > 1 for rec in per_rank[0]["rollouts"] for g in rec["groups"] for t in g["turns"])  # multi-turn
    _check_importance_sampling(per_rank)


@needs_deepspeed
def test_gpu_zero2(tmp_path, tiny_model_path):
    """Also rollouts overlapping training (max_staleness=1): each rank's sampler process on its GPU, the copy shared
    through CUDA IPC."""
    scenarios = _scenarios(NPROC) + ["guess_number:group:async1"]
    ranks = _launch(tmp_path, "zero2.yaml", scenarios, NPROC, tiny_model_path)
    _check(ranks, "guess_number_group", "DEEPSPEED", 2)
    _check_uneven_if_two(ranks, "DEEPSPEED", 2)
    per_rank = scenario(ranks, "guess_number_group_async1")
    assert all(s["device"].startswith("cuda") for s in per_rank)
    check_async(per_rank, max_staleness=1)


@needs_deepspeed
def test_gpu_zero3(tmp_path, tiny_model_path):
    ranks = _launch(tmp_path, "zero3.yaml", _scenarios(NPROC), NPROC, tiny_model_path)
    _check(ranks, "guess_number_group", "DEEPSPEED", 3)
    _check_uneven_if_two(ranks, "DEEPSPEED", 3)


def test_gpu_fsdp2(tmp_path, tiny_model_path):
    ranks = _launch(tmp_path, "fsdp2.yaml", _scenarios(NPROC), NPROC, tiny_model_path)
    _check(ranks, "guess_number_group", "FSDP")
    _check_uneven_if_two(ranks, "FSDP")


@needs_2_gpus
def test_gpu_ddp_multi_gpu(tmp_path, tiny_model_path):
    ranks = _launch(tmp_path, "multi_gpu.yaml", _scenarios(2), 2, tiny_model_path, "--collective_generate")
    _check(ranks, "guess_number_group", "MULTI_GPU")
    _check_uneven_if_two(ranks, "MULTI_GPU")


@needs_vllm
@pytest.mark.skipif(NGPU < 3, reason="needs 3 GPUs: a vLLM server and 2 training ranks")
def test_gpu_vllm_server_two_ranks(tmp_path, bf16_model_path):
    port = free_port()
    env = dict(launch_env(), CUDA_VISIBLE_DEVICES=str(NGPU - 1))
    trl = shutil.which("trl") or "trl"
    server = subprocess.Popen(
        [
            trl,
            "vllm-serve",
            "--model",
            bf16_model_path,
            "--port",
            str(port),
            "--gpu_memory_utilization",
            "0.3",
            "--max_model_len",
            "1024",
        ],
        cwd=REPO,
        env=env,
        stdout=open(tmp_path / "server.log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            with contextlib.suppress(Exception):
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                    break
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            time.sleep(2)
        os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"  # the 2 training ranks; the server has the last GPU
        try:
            ranks = _launch(
                tmp_path,
                "multi_gpu.yaml",
                ["uneven:batch"],
                2,
                bf16_model_path,
                "--vllm_mode",
                "server",
                "--vllm_server_port",
                str(port),
            )
        finally:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        check_uneven(_check(ranks, "uneven_batch", "MULTI_GPU"))
        _check_importance_sampling(scenario(ranks, "uneven_batch"))
    finally:
        kill_tree(server)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-s"]))
