"""EnvGRPOTrainer in real multi-process runs on the CPU (gloo): DDP, DeepSpeed ZeRO-3 and ZeRO-2.

Each launch runs tests/distributed_worker.py on 2 processes through one of our accelerate configs; every rank writes
what it rolled out and trained on, and the tests check:

* both ranks finished (a hang fails the test: hard timeout, then the launcher and its workers are killed);
* no group was split across ranks, and together the ranks rolled out exactly the batch's groups;
* the rewards TRL gathered are the env totals, and the advantages each rank trained on equal a single-process
  computation (``trl_envs.compute_advantages``) over all ranks' trajectories;
* the logged env metrics are the mean over all ranks' episodes;
* with episodes of very different lengths across ranks (rank 0: 1 turn, rank 1: 5 turns) the run finishes and both
  ranks made the same number of generate calls (rank 0's extra ones are dummies). Under DDP every generate call is
  made a collective (``--collective_generate``), under ZeRO-3 it is one for real (parameter gathering): without the
  lock-step both runs hang (checked by hand with ``--no_lockstep``, see docs/distributed.md);
* ``trainer.evaluate()`` on 2 ranks rolls out every test group once, whole, and logs the mean over all ranks;
* the model-free lock-step and vLLM server-mode batching checks of tests/lockstep_worker.py, run inside the DDP launch.

CI time: three launches (DDP, ZeRO-3, ZeRO-2; the DDP and ZeRO-2 ones also train with async rollouts,
``max_staleness=1``) of about 20-45 s each on 2 CPU cores; the imports dominate.
"""

from __future__ import annotations

import importlib.util

import pytest
from distributed_checks import (
    check_async,
    check_evaluation,
    check_groups_rewards_advantages_metrics,
    check_uneven,
    run_worker,
    scenario,
)

pytestmark = pytest.mark.timeout(300)

LAUNCH_TIMEOUT_S = 200  # a normal run takes 20-45 s on 2 shared cores; a lock-step bug hangs forever
CPU_OVERRIDES = ["--num_processes", "2", "--mixed_precision", "no"]  # GPU configs on 2 CPU processes

needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed (pip install -e '.[deepspeed]')"
)


# -- the tests ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ddp_ranks(tmp_path_factory, tiny_model_path) -> list[dict]:
    """One launch of accelerate_configs/cpu_2proc.yaml: the model-free lock-step checks, then guess_number, then the
    uneven env, in the same two processes (one launch: the imports dominate a run's time)."""
    tmp = tmp_path_factory.mktemp("ddp")
    return run_worker(
        tmp,
        "cpu_2proc.yaml",
        ["guess_number:group", "uneven:batch", "uneven_turns:group", "guess_number:group:async1"],
        world_size=2,
        worker_args=["--collective_generate", "--lockstep_checks", "--evaluate"],
        model_path=tiny_model_path,
        timeout_s=LAUNCH_TIMEOUT_S,
    )


@pytest.fixture(scope="module")
def lockstep(ddp_ranks) -> list[dict]:
    return [r["lockstep"] for r in ddp_ranks]


def test_two_processes_ddp_guess_number(ddp_ranks):
    guess = scenario(ddp_ranks, "guess_number_group")
    assert all(s["distributed_type"] == "MULTI_CPU" for s in guess)
    check_groups_rewards_advantages_metrics(guess)
    assert any(t > 1 for s in guess for rec in s["rollouts"] for g in rec["groups"] for t in g["turns"])  # multi-turn


def test_two_processes_ddp_evaluation(ddp_ranks):
    check_evaluation(scenario(ddp_ranks, "guess_number_group"), num_test_groups=2 * 4)  # 2 test batches x 4 groups


def test_two_processes_ddp_rank_finishing_early_does_not_hang(ddp_ranks):
    uneven = scenario(ddp_ranks, "uneven_batch")
    check_groups_rewards_advantages_metrics(uneven)
    check_uneven(uneven)


def test_two_processes_per_turn_rows_pad_every_rank_to_the_same_rows(ddp_ranks):
    """Rank 0's groups last 1 turn, rank 1's 5: with one row per turn rank 1 has 5 blocks per group, rank 0 one, and
    rank 0 is padded with unscorable blocks so TRL can gather rewards across ranks."""
    per_turn = scenario(ddp_ranks, "uneven_turns_group")
    assert [r["mode"] for r in per_turn[0]["rollouts"]] == [r["mode"] for r in per_turn[1]["rollouts"]] == ["train"] * 2
    for r0, r1 in zip(per_turn[0]["rollouts"], per_turn[1]["rollouts"], strict=True):
        assert {t for g in r0["groups"] for t in g["turns"]} == {1} and {
            t for g in r1["groups"] for t in g["turns"]
        } == {5}
        rows = len(r1["row_keys"]) * 5  # 5 blocks per group of G rows
        assert len(r0["advantages"]) == len(r1["advantages"]) == rows
        assert isinstance(r1["advantages"][0], list)  # per-token advantages (per-turn credit)
        assert all(a == 0.0 for row in r0["advantages"][len(r0["row_keys"]) :] for a in row)  # padding trains nothing
    logged = [h for h in per_turn[0]["log_history"] if "rows/filler_fraction" in h]
    assert logged and logged[0]["rows/filler_fraction"] == pytest.approx(0.4)  # 32 of rank 0's 40 rows, none of 1's


def test_two_processes_ddp_async_rollouts(ddp_ranks):
    check_async(scenario(ddp_ranks, "guess_number_group_async1"), max_staleness=1)


# The lock-step and vLLM batching checks of tests/lockstep_worker.py, run on the same 2-process gloo group (no model;
# the samplers' calls are collectives; the vLLM ones drive TRL's own server-mode VLLMGeneration.generate with a fake
# vLLM client on rank 0).


def test_lockstep_checks_ran_on_a_real_two_process_gloo_group(lockstep):
    assert [r["rank"] for r in lockstep] == [0, 1]
    assert all(r["world_size"] == 2 and r["backend"] == "gloo" for r in lockstep)


def test_lockstep_rank_that_finishes_early_keeps_calling_until_all_are_done(lockstep):
    r0, r1 = lockstep[0]["uneven_calls"], lockstep[1]["uneven_calls"]
    assert r0["num_calls"] == r1["num_calls"] == 4  # the sampler's calls are collectives: equal counts or a hang
    assert r0["num_dummy_calls"] == 3 and r1["num_dummy_calls"] == 0
    assert r0["batch_sizes"] == [1, 1, 1, 1]  # a dummy call is one one-token request


def test_lockstep_equal_batch_sizes_pads_every_call_to_the_largest_rank(lockstep):
    r0, r1 = lockstep[0]["equal_batch_sizes"], lockstep[1]["equal_batch_sizes"]
    assert r0["batch_sizes"] == r1["batch_sizes"] == [3, 2]  # real call padded to 3; rank 0's drain call padded to 2
    assert r0["returned"] == 1 and r1["returned"] == 3  # padding results are dropped
    assert r0["padding"] == 2 and r1["padding"] == 0
    assert r0["num_calls"] == r1["num_calls"] == 2


def test_vllm_server_mode_each_rank_gets_its_own_completions(lockstep):
    r1 = lockstep[1]["vllm_server"]
    for turn, row in enumerate(r1["observed"]):
        (p_a, tokens_a, _, reason_a), (p_b, tokens_b, _, reason_b) = row
        assert p_a == 20 + turn and tokens_a == [1000 * p_a + j for j in range(5)] and reason_a == "length"
        assert p_b == 30 + turn and tokens_b == [1000 * p_b + j for j in range(3)] and reason_b == "stop"
    ((p0, tokens0, _, _),) = lockstep[0]["vllm_server"]["observed"][0]
    assert p0 == 10 and tokens0 == [10000]  # rank 0's own 1-token budget


def test_vllm_server_mode_rank0_settings_cover_every_rank(lockstep):
    calls = lockstep[0]["vllm_server"]["client_calls"]
    assert len(calls) == 3  # one server request per lock-step round
    assert all(c["num_prompts"] == 4 for c in calls)  # 2 ranks x 2 prompts, rank 0 padded
    # rank 0 asked for 1 token (then only dummies): the server must still be asked for rank 1's 5 tokens, and get
    # rank 1's stop token
    assert [c["max_tokens"] for c in calls] == [5, 5, 5]
    assert [c["stop_token_ids"][0] for c in calls] == [30_002, 31_002, 32_002]
    assert lockstep[0]["vllm_server"]["max_completion_length_after"] == 16  # TRL's setting restored


def test_vllm_server_mode_calls_stay_in_lock_step(lockstep):
    r0, r1 = lockstep[0]["vllm_server"], lockstep[1]["vllm_server"]
    assert r0["num_calls"] == r1["num_calls"] == 3
    assert r0["num_dummy_calls"] == 2 and r1["num_dummy_calls"] == 0


def test_vllm_server_logprobs_are_the_sampled_tokens_not_the_top_ranked(lockstep):
    # the fake server lists the sampled token second at every position (as vLLM may when logprobs > 0)
    _, _, logprobs, _ = lockstep[1]["vllm_server"]["observed"][0][0]
    assert logprobs == [-0.5 - j for j in range(5)]


@needs_deepspeed
def test_zero3_rank_finishing_early_does_not_hang(tmp_path, tiny_model_path):
    """accelerate_configs/zero3.yaml on 2 CPU processes: generation gathers the sharded parameters on every call."""
    ranks = run_worker(
        tmp_path,
        "zero3.yaml",
        ["uneven:batch"],
        world_size=2,
        model_path=tiny_model_path,
        launch_args=CPU_OVERRIDES,
        timeout_s=LAUNCH_TIMEOUT_S,
    )
    uneven = scenario(ranks, "uneven_batch")
    assert all(s["distributed_type"] == "DEEPSPEED" and s["zero_stage"] == 3 for s in uneven)
    check_groups_rewards_advantages_metrics(uneven)
    check_uneven(uneven)


@needs_deepspeed
def test_zero2_two_processes_guess_number(tmp_path, tiny_model_path):
    """accelerate_configs/zero2.yaml on 2 CPU processes."""
    ranks = run_worker(
        tmp_path,
        "zero2.yaml",
        ["guess_number:group", "guess_number:group:async1"],
        world_size=2,
        model_path=tiny_model_path,
        launch_args=CPU_OVERRIDES,
        timeout_s=LAUNCH_TIMEOUT_S,
    )
    guess = scenario(ranks, "guess_number_group")
    assert all(s["distributed_type"] == "DEEPSPEED" and s["zero_stage"] == 2 for s in guess)
    check_groups_rewards_advantages_metrics(guess)
    check_async(scenario(ranks, "guess_number_group_async1"), max_staleness=1)  # rollouts overlapping ZeRO-2 steps


# -- the configs themselves -----------------------------------------------------------------------------------------


def _resolved_launch(config: str, *extra: str):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from mp_launch import CONFIGS

    args = launch_command_parser().parse_args(["--config_file", str(CONFIGS / config), *extra, "train.py"])
    args, _, _ = _validate_launch_command(args)
    return args


def test_every_config_loads_with_the_intended_distributed_type():
    from accelerate.commands.config.config_args import load_config_from_file
    from mp_launch import CONFIGS

    expected = {
        "single_gpu.yaml": ("NO", 1),
        "multi_gpu.yaml": ("MULTI_GPU", 8),
        "zero2.yaml": ("DEEPSPEED", 8),
        "zero3.yaml": ("DEEPSPEED", 8),
        "fsdp2.yaml": ("FSDP", 8),
        "cpu_2proc.yaml": ("MULTI_GPU", 2),
        "multi_node.yaml": ("MULTI_GPU", 16),
    }
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == sorted(expected)
    for name, (dist_type, nproc) in expected.items():
        cfg = load_config_from_file(str(CONFIGS / name))
        assert (str(cfg.distributed_type).rsplit(".", 1)[-1], cfg.num_processes) == (dist_type, nproc), name
    assert load_config_from_file(str(CONFIGS / "zero2.yaml")).deepspeed_config["zero_stage"] == 2
    assert load_config_from_file(str(CONFIGS / "zero3.yaml")).deepspeed_config["zero_stage"] == 3
    assert load_config_from_file(str(CONFIGS / "fsdp2.yaml")).fsdp_config["fsdp_version"] == 2


def test_cpu_config_starts_two_processes_and_multi_gpu_on_cpu_is_the_same_launch():
    """cpu_2proc.yaml resolves to torchrun with 2 processes and no mixed precision (not the single-process launcher
    that `--cpu` / MULTI_CPU configs pick), and multi_gpu.yaml with `--num_processes 2 --mixed_precision no` resolves
    to exactly the same launch, which the ddp_ranks fixture runs for real."""
    cpu = _resolved_launch("cpu_2proc.yaml")
    assert cpu.multi_gpu and not cpu.cpu and cpu.num_processes == 2 and cpu.mixed_precision == "no"
    ddp = _resolved_launch("multi_gpu.yaml", "--num_processes", "2", "--mixed_precision", "no")
    ignore = {"config_file", "nondefault"}  # nondefault: which flags were typed
    assert {k: v for k, v in vars(ddp).items() if k not in ignore} == {
        k: v for k, v in vars(cpu).items() if k not in ignore
    }
