"""Every timing bench runs on a tiny setting, and its headline moves when one side is deliberately slowed: the
number it prints is computed from what it measured, not assumed. (bench/learning*.py, cartpole, credit, dpo and
self_play measure learning, not time; scaling launches processes: not run here.)"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def bench(tiny_model_path):
    sys.path.insert(0, str(BENCH))
    try:
        yield lambda name: importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def test_rollout_batching_share_rises_when_envs_are_slowed(bench, tiny_model_path, capsys):
    run = bench("rollout_batching").main
    base = run(["--tiny", "--model_path", tiny_model_path])
    slowed = run(["--tiny", "--model_path", tiny_model_path, "--slow_env_ms", "60"])
    out = capsys.readouterr().out
    assert "timed: the whole run_rollout_batch call" in out and "resident memory growth per turn" in out
    assert base["calls_per_turn"] == 1.0
    assert slowed["outside_share"] > base["outside_share"] + 0.2  # 3 turns x 4 episodes x 60 ms of env time


def test_long_episodes_share_rises_when_envs_are_slowed(bench, tiny_model_path, capsys):
    run = bench("long_episodes").main
    base = run(["--tiny", "--model_path", tiny_model_path])
    slowed = run(["--tiny", "--model_path", tiny_model_path, "--slow_env_ms", "40"])
    assert "timed (wall): the whole run_rollout_batch call" in capsys.readouterr().out
    assert slowed["outside_share"] > base["outside_share"] + 0.15  # 20 turns x 2 episodes x 40 ms
    assert base["scaling"] < 3.5  # the token-exact check: ~2 when linear


def test_env_latency_wait_follows_the_env_latency(bench, capsys):
    run = bench("env_latency").main
    short = run(
        [
            "--no_model",
            "--groups",
            "2",
            "--group_size",
            "2",
            "--turns",
            "3",
            "--latency",
            "0.01",
            "--repeats",
            "1",
            "--warmup",
            "0",
        ]
    )
    long = run(
        [
            "--no_model",
            "--groups",
            "2",
            "--group_size",
            "2",
            "--turns",
            "3",
            "--latency",
            "0.1",
            "--repeats",
            "1",
            "--warmup",
            "0",
        ]
    )
    assert "timed:" in capsys.readouterr().out
    assert long["stub_wait"] >= 0.3 > short["stub_wait"]


@pytest.mark.parametrize("side, expect_above_one", [("env", True), ("plain", False)])
def test_vs_trl_grpo_ratio_follows_a_slowed_side(bench, tiny_model_path, side, expect_above_one, capsys):
    ratios = bench("vs_trl_grpo").main(
        [
            "--models",
            "tiny",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--repeats",
            "1",
            "--model_path",
            tiny_model_path,
            "--handicap",
            f"{side}:600",
        ]
    )
    assert "timed: each optimizer step" in capsys.readouterr().out
    for clock in ("wall", "cpu"):
        assert (ratios["tiny"][clock] > 1.3) if expect_above_one else (ratios["tiny"][clock] < 0.77), ratios


@pytest.mark.parametrize("side, expect_above_one", [("trl", True), ("env", False)])
def test_vs_env_factory_ratio_follows_a_slowed_side(bench, tiny_model_path, side, expect_above_one, capsys):
    result = bench("vs_env_factory").main(["--tiny", "--model_path", tiny_model_path, "--handicap", f"{side}:1500"])
    out = capsys.readouterr().out
    assert "timed on both sides: the whole _generate_and_score_completions call" in out
    slowed = result["trl_step_s"] if side == "trl" else result["env_step_s"]
    assert slowed >= 1.5
    assert (result["ratio"] > 1.0) if expect_above_one else (result["ratio"] < 1.0), result


def test_agent_endpoint_overhead_rises_when_the_agent_is_slowed(bench, tiny_model_path, capsys):
    pytest.importorskip("uvicorn")
    pytest.importorskip("openai")
    run = bench("agent_endpoint").main
    tiny = [
        "--model_path",
        tiny_model_path,
        "--groups",
        "2",
        "--group_size",
        "2",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--max_tokens",
        "80",
    ]
    base = run(tiny)
    slowed = run(tiny + ["--slow_agent_ms", "30"])
    out = capsys.readouterr().out
    assert "generate calls/wave 1.00" in out and "done 4/4" in out
    # 2 scripted calls per agent, 4 agents, 30 ms each, on one event loop: >= 0.2 s more outside the sampler, in
    # wall and in CPU time (a busy wait)
    for agent in ("raw agent", "httpx agent"):
        for key in ("overhead_per_call", "overhead_cpu_per_call"):
            assert slowed["scripted"][agent][key] > base["scripted"][agent][key] + 0.02, (agent, key)


def test_async_rollouts_overlap_shows_when_envs_wait(bench, capsys):
    """Env steps waiting 150 ms each (2 turns) on 2 groups: rolling out 2 batches ahead (k=2) overlaps those waits
    with training, so async/sync episodes/s must be well above 1; the ratios come from the timed runs."""
    ratios = bench("async_rollouts").main(
        ["--steps", "3", "--warmup", "1", "--groups_per_step", "2", "--repeats", "1", "--wait_ms", "150", "150"]
    )
    out = capsys.readouterr().out
    assert "HEADLINE async k=1 / sync episodes/s, with env wait" in out and "Timed: wall clock" in out
    assert ratios["async k=2, env wait"] > 1.3
    assert ratios["async k=1, env wait"] > 1.0


def test_multi_agent_pads_ours_to_the_cookbooks_prompt_length(bench, tmp_path, capsys):
    """The normalised comparison is only checkable if ours_padded samples prompts as long as the cookbook's."""
    pytest.importorskip("tinker_cookbook")
    pytest.importorskip("textarena")
    result = bench("multi_agent").main(
        ["--steps", "1", "--warmup", "0", "--repeats", "1", "--out", str(tmp_path / "multi_agent.json")]
    )
    out = capsys.readouterr().out
    assert "cookbook / ours_padded per move" in out and (tmp_path / "multi_agent.json").exists()
    (sides,) = result["rounds"]
    cookbook, padded = sides["cookbook"]["prompt_tokens_per_move"], sides["ours_padded"]["prompt_tokens_per_move"]
    assert result["pad_tokens"] > 200 and abs(padded - cookbook) / cookbook < 0.15, (cookbook, padded)
    assert all(s["valve"] == 0 and s["calls"] > 0 for s in sides.values())


def test_gpu_rollouts_cpu_smoke_measures_every_backend(bench, tmp_path, capsys):
    """The GPU bench's --cpu smoke run: every backend, sync and async, both recipes; its results JSON carries the exact
    command and the device, ratios come from measured numbers and no target is judged on a CPU."""
    out = tmp_path / "gpu_rollouts.json"
    report = bench("gpu_rollouts").main(["--cpu", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "timed: wall time between optimizer-step ends" in printed
    saved = json.loads(out.read_text())
    assert saved["command"] == f"python bench/gpu_rollouts.py --cpu --out {out}" and saved["device"].startswith("CPU")
    runs = {(r["recipe"], r["backend"], r["max_staleness"]) for r in saved["results"]}
    assert runs == {
        (recipe, backend, k)
        for recipe in ("arithmetic", "guess_number")
        for backend in ("generate", "static_cache", "continuous_batching")
        for k in (0, 1)
    }
    for r in saved["results"]:
        assert r["steady_step_s"] > 0 and r["generation_tokens_per_s"] > 0 and r["peak_rss_gb"] > 0
        assert all(n > 0 for n in r["sampled_tokens_per_step"])
    assert saved["failed"] == [] and saved["not_run"] == []
    assert all(t["met"] is None for t in saved["targets"]) and len(saved["targets"]) == 3
    assert "MET" not in printed.replace("not judged", "")
    assert report["ratios"] == saved["ratios"] and saved["ratios"]


def test_gpu_rollouts_keeps_going_past_a_failed_run(bench, tmp_path, capsys, monkeypatch):
    module = bench("gpu_rollouts")
    real = module.one_run

    def failing(model_path, tokenizer, spec, backend, *rest):
        if backend == "static_cache":
            raise RuntimeError("CUDA out of memory (stand-in)\nmore lines")
        return real(model_path, tokenizer, spec, backend, *rest)

    monkeypatch.setattr(module, "one_run", failing)
    out = tmp_path / "r.json"
    args = ["--cpu", "--recipes", "arithmetic", "--staleness", "0", "--backends", "static_cache", "generate"]
    module.main([*args, "--out", str(out)])
    saved = json.loads(out.read_text())
    assert [r["backend"] for r in saved["results"]] == ["generate"]
    assert saved["failed"] == [
        "Qwen/Qwen2.5-0.5B-Instruct arithmetic (single turn) static_cache k=0: "
        "RuntimeError: CUDA out of memory (stand-in)"
    ]
    assert "FAILED Qwen/Qwen2.5-0.5B-Instruct arithmetic" in capsys.readouterr().out
