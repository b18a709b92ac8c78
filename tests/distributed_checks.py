"""What every multi-process EnvGRPOTrainer run must satisfy, on any world size (shared by tests/test_distributed.py on
CPU and tests/test_gpu.py, run by scripts/gpu_check.sh). The runs are tests/distributed_worker.py launches."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
from mp_launch import accelerate_launch, accelerate_launch_machines, read_ranks

G = 4  # num_generations
PER_DEVICE = 8  # rows per rank = 2 groups per rank
STEPS = 2
SHORT, LONG = 1, 5  # turns of the uneven env's episodes on rank 0 / rank 1


def run_worker(
    tmp_path: Path,
    config: str,
    scenarios: list[str],
    *,
    world_size: int,
    model_path: str,
    timeout_s: float,
    launch_args=(),
    worker_args=(),
    num_machines: int = 1,
) -> list[dict]:
    """Launch tests/distributed_worker.py with ``config``; every rank's result (all must have finished). With
    ``num_machines`` > 1, as many launches on this machine standing in for machines (``accelerate_launch_machines``),
    ``world_size`` processes over all of them."""
    out = tmp_path / "out"
    script_args = [
        "--out",
        str(out),
        "--scenarios",
        *scenarios,
        "--steps",
        str(STEPS),
        "--num_generations",
        str(G),
        "--per_device_batch",
        str(PER_DEVICE),
        "--short_turns",
        str(SHORT),
        "--long_turns",
        str(LONG),
        "--model_path",
        model_path,
        *worker_args,
    ]
    worker = "tests/distributed_worker.py"
    if num_machines > 1:
        accelerate_launch_machines(
            config,
            worker,
            script_args,
            num_machines=num_machines,
            timeout_s=timeout_s,
            log_dir=tmp_path,
            launch_args=list(launch_args),
        )
    else:
        accelerate_launch(
            config,
            worker,
            script_args,
            timeout_s=timeout_s,
            log_path=tmp_path / "launch.log",
            launch_args=list(launch_args),
        )
    ranks = read_ranks(out, world_size)
    assert all(r["finished"] for r in ranks)
    return ranks


def scenario(ranks: list[dict], name: str) -> list[dict]:
    per_rank = [r["scenarios"][name] for r in ranks]
    assert [s["rank"] for s in per_rank] == list(range(len(ranks)))
    assert all(s["world_size"] == len(ranks) and s["finished"] for s in per_rank)
    return per_rank


def expected_advantages(totals_per_group: list[list[float]], scale: str) -> list[float]:
    """Single-process advantages of all groups (``trl_envs.compute_advantages``, TRL's formula)."""
    from trl_envs import compute_advantages

    groups = [types.SimpleNamespace(get_total_rewards=lambda t=t: t) for t in totals_per_group]
    return [float(a) for adv in compute_advantages(groups, scale=scale) for a in adv]


def train_rollouts(per_rank: list[dict]) -> list[list[dict]]:
    return [[rec for rec in s["rollouts"] if rec["mode"] == "train"] for s in per_rank]


def env_logs(per_rank: list[dict]) -> list[dict]:
    return [h for h in per_rank[0]["log_history"] if "env/all/reward/total" in h]


def check_groups_rewards_advantages_metrics(per_rank: list[dict]) -> None:
    """Whole groups per rank, rewards and advantages equal to a single-process computation, env metrics = the mean
    over all ranks' episodes."""
    world = len(per_rank)
    scale = per_rank[0]["scale_rewards"]
    rollouts = train_rollouts(per_rank)
    assert all(len(r) == STEPS for r in rollouts), "every rank rolls out once per step"
    logs = env_logs(per_rank)
    assert len(logs) == STEPS
    for step in range(STEPS):
        recs = [r[step] for r in rollouts]
        # whole groups per rank: each block of G rows is one group key, and the group has G trajectories
        keys_per_rank = []
        for rec in recs:
            rows = rec["row_keys"]
            assert len(rows) == PER_DEVICE
            blocks = [rows[i : i + G] for i in range(0, len(rows), G)]
            assert all(len(set(b)) == 1 for b in blocks), f"a group was split inside rank rows: {rows}"
            keys_per_rank.append([b[0] for b in blocks])
            assert all(len(g["totals"]) == G for g in rec["groups"])
        flat = [k for keys in keys_per_rank for k in keys]
        assert len(flat) == len(set(flat)), f"a group was rolled out on two ranks: {keys_per_rank}"
        assert set(flat) == {f"train/{step}/{k}" for k in range(world * PER_DEVICE // G)}, "groups lost or invented"

        # rewards: what TRL gathered (identical on every rank) is the env totals, in rank order
        totals_per_group = [g["totals"] for rec in recs for g in rec["groups"]]
        all_totals = [t for g in totals_per_group for t in g]
        for rec in recs:
            assert rec["gathered_rewards"] == pytest.approx(all_totals, abs=1e-6)

        # advantages: a single-process computation over all ranks' trajectories, sliced per rank
        expected = expected_advantages(totals_per_group, scale)
        for rank, rec in enumerate(recs):
            local = expected[rank * PER_DEVICE : (rank + 1) * PER_DEVICE]
            assert rec["advantages"] == pytest.approx(local, abs=1e-4), f"rank {rank} trained on other advantages"
            assert rec["gathered_advantages"] == pytest.approx(expected, abs=1e-4)
        assert any(abs(a) > 0 for a in expected), "no learning signal at all: the check would be vacuous"

        # env metrics: the logged value is the mean over ALL ranks' episodes
        names = set().union(*(rec["metric_sums"] for rec in recs))
        for name in names:
            total = sum(rec["metric_sums"].get(name, [0.0, 0])[0] for rec in recs)
            count = sum(rec["metric_sums"].get(name, [0.0, 0])[1] for rec in recs)
            assert logs[step][name] == pytest.approx(total / count, rel=1e-4, abs=1e-5), name
        episodes = sum(rec["metric_sums"]["env/all/reward/total"][1] for rec in recs)
        assert episodes == world * PER_DEVICE


def check_uneven(per_rank: list[dict]) -> None:
    """2 ranks; rank 0's episodes last SHORT turns, rank 1's LONG: both finished after the same number of generate
    calls (rank 0's extra ones are dummies), and the logged metrics cover both ranks' episodes."""
    assert len(per_rank) == 2
    logs = env_logs(per_rank)
    rollouts = train_rollouts(per_rank)
    for step in range(STEPS):
        r0, r1 = (r[step] for r in rollouts)
        assert {t for g in r0["groups"] for t in g["turns"]} == {SHORT}
        assert {t for g in r1["groups"] for t in g["turns"]} == {LONG}
        assert r0["generate_calls"] == r1["generate_calls"] == LONG, "ranks made different numbers of generate calls"
        assert r0["dummy_calls"] == LONG - SHORT and r1["dummy_calls"] == 0
        assert r0["real_sampler_calls"] == SHORT and r1["real_sampler_calls"] == LONG
        assert logs[step]["env/all/turns"] == pytest.approx((SHORT + LONG) / 2)  # both ranks' episodes, equally many
        assert logs[step][f"env/turns{SHORT}/turns"] == SHORT and logs[step][f"env/turns{LONG}/turns"] == LONG


def check_evaluation(per_rank: list[dict], num_test_groups: int) -> None:
    """``trainer.evaluate()`` on several ranks: every test group rolled out once, on one rank, whole; the logged
    ``eval_env`` metrics are the mean over all ranks' evaluation episodes."""
    evals = [[rec for rec in s["rollouts"] if rec["mode"] == "eval"] for s in per_rank]
    keys = []
    for recs in evals:
        for rec in recs:
            rows = rec["row_keys"]
            blocks = [rows[i : i + G] for i in range(0, len(rows), G)]
            assert all(len(set(b)) == 1 for b in blocks), f"an evaluation group was split: {rows}"
            keys += [b[0] for b in blocks]
    assert (
        sorted(keys) == sorted(set(keys)) and len(keys) == num_test_groups and all(k.startswith("eval/") for k in keys)
    )
    metrics = per_rank[0]["eval_metrics"]
    total = sum(rec["metric_sums"]["env/all/reward/total"][0] for recs in evals for rec in recs)
    count = sum(rec["metric_sums"]["env/all/reward/total"][1] for recs in evals for rec in recs)
    assert count == num_test_groups * G
    # TRL averages the per-round means; every round has the same number of episodes, so that is the overall mean
    assert metrics["eval_env/all/reward/total"] == pytest.approx(total / count, rel=1e-4, abs=1e-5)


def check_async(per_rank: list[dict], max_staleness: int) -> None:
    """max_staleness >= 1: whole groups, rewards and advantages as in a synchronous run, every trained batch at most
    ``max_staleness`` steps older than the step, some sampled ahead of training, the ranks in lock-step (same
    batches, same loss)."""
    check_groups_rewards_advantages_metrics(per_rank)
    batches = [s["async_batches"] for s in per_rank]
    assert len(batches[0]) > 0 and all(len(b) == len(batches[0]) for b in batches)
    assert all(0 <= b["step"] - b["oldest_version"] <= max_staleness for rank in batches for b in rank)
    assert any(b["oldest_version"] < b["step"] for b in batches[0])  # sampled ahead of training
    assert all([b["step"] for b in rank] == [b["step"] for b in batches[0]] for rank in batches)
    losses = [[h["loss"] for h in s["log_history"] if "loss" in h] for s in per_rank]
    assert all(loss == losses[0] for loss in losses)
