"""accelerate_configs/multi_node.yaml, run on the CPU as two machines on 127.0.0.1.

Two ``accelerate launch`` commands, as a user starts one per machine (``--num_machines 2``, ``--machine_rank 0`` and
``1``, the main machine's address and port), one gloo process each: the two ranks form one job across the
"machines", every group is rolled out whole on one rank, and the rewards and advantages each rank trained on equal the
single-process computation over both ranks' trajectories, exactly as the one-machine 2-process test checks
(tests/test_distributed.py). One launch per machine, 2 steps of guess_number on the tiny model.
"""

from __future__ import annotations

import pytest
from distributed_checks import check_groups_rewards_advantages_metrics, run_worker, scenario

pytestmark = pytest.mark.timeout(300)


def test_two_machines_on_localhost_train_as_one_job(tmp_path, tiny_model_path):
    ranks = run_worker(
        tmp_path,
        "multi_node.yaml",
        ["guess_number:group"],
        world_size=2,
        model_path=tiny_model_path,
        timeout_s=240,
        num_machines=2,
        launch_args=["--num_processes", "2", "--mixed_precision", "no"],
    )
    assert [(r["rank"], r["machine_rank"], r["local_rank"]) for r in ranks] == [(0, 0, 0), (1, 1, 0)]
    guess = scenario(ranks, "guess_number_group")
    assert all(s["distributed_type"] == "MULTI_CPU" and s["world_size"] == 2 for s in guess)
    check_groups_rewards_advantages_metrics(guess)
