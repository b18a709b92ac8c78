"""Nothing silent, nothing stuck, nothing half-written: checkpoints, runs that learn nothing, group skips, evaluation
budgets and early checks, tested on the library functions (in-process, the tiny model where a trainer is needed)."""

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from trl_envs import FailFast, RetryOnFailure, run_rollout_batch
from trl_envs.errors.messages import shorten
from trl_envs.errors.preflight import check_hub_access, check_model_path
from trl_envs.errors.types import RunFailed, UsageError
from trl_envs.trainers.checkpoints import MARKER, CheckpointError, check_resume_settings, hold_output_dir, write_marker
from trl_envs.trainers.health import TrainingHealthCallback, TrainingHealthWarning
from trl_envs.trainers.resume import resolve_checkpoint

REPO = Path(__file__).resolve().parents[1]


def make_checkpoint(folder: Path, step: int, complete: bool = True, settings=None) -> Path:
    from safetensors.torch import save_file

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    save_file({"w": torch.zeros(64)}, str(path / "model.safetensors"))
    if complete:
        write_marker(str(path), {"global_step": step, "settings": settings or {}})
    return path


# -- checkpoints you can trust -----------------------------------------------------------------------------------


def test_last_skips_a_checkpoint_whose_writing_was_interrupted_and_says_so(tmp_path, capsys):
    make_checkpoint(tmp_path, 1)
    (tmp_path / "checkpoint-2").mkdir()  # killed while writing: no trainer_state.json, no marker
    (tmp_path / "checkpoint-2" / "model.safetensors").write_bytes(b"\x00" * 10)
    for last in ("last", True):
        assert resolve_checkpoint(last, str(tmp_path)) == str(tmp_path / "checkpoint-1")
        assert f"skipping {tmp_path / 'checkpoint-2'}: incomplete" in capsys.readouterr().out


def test_a_truncated_safetensors_file_is_named(tmp_path):
    path = make_checkpoint(tmp_path, 3)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match=r"checkpoint-3 is corrupted: .*model\.safetensors.*truncated"):
        resolve_checkpoint("last", str(tmp_path))
    (path / "model.safetensors").write_bytes(b"\xff" * 4)  # not even a header
    with pytest.raises(CheckpointError, match=r"model\.safetensors is not a valid safetensors file"):
        resolve_checkpoint(str(path), str(tmp_path))


def test_a_checkpoint_without_trainer_state_is_named(tmp_path):
    path = make_checkpoint(tmp_path, 2)
    (path / "trainer_state.json").unlink()
    with pytest.raises(CheckpointError, match=r"checkpoint-2 is incomplete: .*trainer_state\.json is missing"):
        resolve_checkpoint(str(path), str(tmp_path))


def test_resuming_with_other_settings_is_refused_with_every_difference_listed(capsys):
    marker = {"settings": {"num_generations": 8, "per_device_train_batch_size": 64, "model": "m", "env": "A"}}
    now = {"num_generations": 4, "per_device_train_batch_size": 64, "model": "m", "env": "B"}
    with pytest.raises(CheckpointError) as e:
        check_resume_settings("ckpt", marker, now)
    assert "num_generations: 8 in the checkpoint, 4 now" in str(e.value) and "env: 'A'" in str(e.value)
    assert "per_device_train_batch_size" not in str(e.value) and "--resume_allow_changes" in str(e.value)
    check_resume_settings("ckpt", marker, now, allow_changes=True)  # the explicit override: said, not refused
    assert "changed settings" in capsys.readouterr().out


def test_a_second_run_on_the_same_output_dir_is_refused(tmp_path):
    from trl_envs.trainers.checkpoints import LOCK_FILE

    holder = subprocess.Popen(  # another process holding the run's lock, as a running trainer does
        [
            sys.executable,
            "-c",
            "import time\nfrom filelock import FileLock\n"
            f"with FileLock({str(tmp_path / LOCK_FILE)!r}):\n    print('held', flush=True)\n    time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match="is in use by another run"):
            with hold_output_dir(str(tmp_path)):
                pass
    finally:
        holder.kill()
        holder.wait()
    with hold_output_dir(str(tmp_path)), hold_output_dir(str(tmp_path)):  # free again; re-entrant in a process
        pass


def test_trainer_marks_checkpoints_and_refuses_resuming_with_another_group_size(
    cpu_grpo_config, tiny_model_path, tokenizer
):
    from trl_envs import EnvGRPOTrainer, Renderer, make_env_dataset

    def trainer(**overrides):
        args = cpu_grpo_config(**{"save_strategy": "steps", "save_steps": 1, **overrides})
        group = overrides.get("num_generations", 4)
        env = make_env_dataset(
            "arithmetic", Renderer(tokenizer), group_size=group, batch_size=8 // group, num_batches=4, max_operand=3
        )
        return EnvGRPOTrainer(tiny_model_path, args, env, processing_class=tokenizer)

    first = trainer()
    first.train()
    checkpoint = Path(first.args.output_dir) / "checkpoint-1"
    marker = json.loads((checkpoint / MARKER).read_text())
    assert marker["settings"]["num_generations"] == 4 and marker["settings"]["model"] == tiny_model_path
    with pytest.raises(CheckpointError, match="num_generations: 4 in the checkpoint, 2 now"):
        trainer(num_generations=2, max_steps=2).train(resume_from_checkpoint="last")


# -- a run that learns nothing says so ---------------------------------------------------------------------------


def test_rewards_that_overflow_the_group_statistics_stop_training_naming_env_and_step(
    cpu_grpo_config, tiny_model_path, tokenizer
):
    import reliability_envs

    from trl_envs import EnvGRPOTrainer, Renderer

    env = reliability_envs.spread(Renderer(tokenizer), scale=1e30, group_size=4, batch_size=2)
    trainer = EnvGRPOTrainer(tiny_model_path, cpu_grpo_config(), env, processing_class=tokenizer)
    with pytest.raises(RunFailed, match=r"step 1: Group \(row train/.*total reward 1e\+30 overflows"):
        trainer.train()


def test_steps_without_mixed_rewards_warn_each_time_then_stop_the_run(cpu_grpo_config, tiny_model_path, tokenizer):
    import reliability_envs

    from trl_envs import EnvGRPOTrainer, Renderer

    env = reliability_envs.constant(Renderer(tokenizer), reward=1.0, group_size=4, batch_size=2)
    trainer = EnvGRPOTrainer(
        tiny_model_path, cpu_grpo_config(max_steps=5, health_patience=2), env, processing_class=tokenizer
    )
    with pytest.warns(TrainingHealthWarning, match="no group had mixed rewards") as warned:
        with pytest.raises(RunFailed, match="stopped at step 2: 2 steps in a row"):
            trainer.train()
    assert len([w for w in warned if issubclass(w.category, TrainingHealthWarning)]) == 2
    assert trainer.state.global_step == 2


@pytest.mark.parametrize(
    ("logs", "problem"),
    [
        ({"loss": 0.0, "env/all/skipped_groups": 1.0, "env/all/mixed_rewards": 0.0}, "every group was skipped"),
        ({"loss": 0.0, "grad_norm": 0.0, "env/all/mixed_rewards": 0.5}, "the gradient is zero"),
        ({"loss": 0.0, "entropy": 0.0, "grad_norm": 1.0, "env/all/mixed_rewards": 0.5}, "entropy 0 is below"),
    ],
)
def test_the_health_watchdog_names_each_kind_of_dead_step(logs, problem):
    from types import SimpleNamespace

    callback = TrainingHealthCallback(patience=2)
    state = SimpleNamespace(global_step=7)
    with pytest.warns(TrainingHealthWarning, match=problem):
        callback.on_log(None, state, None, logs=logs)
    callback.on_log(
        None, state, None, logs={"loss": 0.1, "grad_norm": 1.0, "entropy": 1.0, "env/all/mixed_rewards": 0.5}
    )  # a healthy step resets the count
    assert callback.unhealthy_in_a_row == 0
    with pytest.raises(RunFailed, match="2 steps in a row"), pytest.warns(TrainingHealthWarning):
        for _ in range(2):
            callback.on_log(None, state, None, logs=logs)


def test_solved_steps_are_not_dead_steps_but_a_fall_back_to_no_signal_is():
    from types import SimpleNamespace

    callback = TrainingHealthCallback(patience=2)
    state = SimpleNamespace(global_step=1)

    def log(mixed, reward):
        callback.on_log(
            None,
            state,
            None,
            logs={
                "loss": 0.0,
                "grad_norm": 0.0 if mixed == 0 else 1.0,
                "entropy": 0.02,
                "env/all/mixed_rewards": mixed,
                "env/all/reward/total": reward,
            },
        )

    log(0.5, 0.8)
    for _ in range(5):  # every answer right, again and again: success, not a dead run
        log(0.0, 1.0)
    assert callback.unhealthy_in_a_row == 0
    with pytest.raises(RunFailed, match="no group had mixed rewards"), pytest.warns(TrainingHealthWarning):
        for _ in range(2):  # every answer wrong, every group alike: nothing to learn from
            log(0.0, 0.0)


def test_a_non_finite_loss_stops_the_run():
    from types import SimpleNamespace

    with pytest.raises(RunFailed, match="step 3 on the env: the loss is nan"):
        TrainingHealthCallback().on_log(None, SimpleNamespace(global_step=3), None, logs={"loss": math.nan})


def test_dpo_pairs_with_identical_answers_are_dropped_with_a_count_or_refused():
    from datasets import Dataset

    from trl_envs.training_data.preference_checks import drop_identical_pairs

    data = Dataset.from_dict({"prompt": ["p"] * 3, "chosen": ["a", "b", "c"], "rejected": ["x", "b", "c"]})
    with pytest.warns(UserWarning, match="dropped 2 of 3 rows .* whose 'chosen' equals 'rejected'"):
        kept = drop_identical_pairs(data, "train", ("chosen", "rejected"))
    assert kept["chosen"] == ["a"]
    with pytest.raises(ValueError, match="in every one of the 2 rows"):
        drop_identical_pairs(data.select([1, 2]), "train", ("chosen", "rejected"))


# -- groups the cookbook means to skip ---------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [FailFast(), RetryOnFailure(max_retries=3)])
def test_initial_observation_overflow_skips_the_group_under_every_strategy(strategy, renderer):
    pytest.importorskip("tinker_cookbook")  # the error is the cookbook's: trl_envs.tinker raises it for its envs
    import reliability_envs

    from trl_envs.tinker.env import InitialObservationOverflowError

    class Overflowing(reliability_envs.Chat):
        async def initial_observation(self):
            raise InitialObservationOverflowError("prompt over the budget")

    builders = [
        reliability_envs.Group(lambda i: Overflowing(renderer), 2),
        reliability_envs.Group(lambda i: reliability_envs.Chat(renderer, 1.0), 2),
    ]

    class Sampler:
        def sample(self, requests):
            from trl_envs import TokensWithLogprobs

            return [TokensWithLogprobs([renderer.end_of_turn_token_id], None) for _ in requests]

    result = run_rollout_batch(builders, Sampler(), strategy=strategy)
    assert result.groups[0] is None and result.groups[1] is not None
    assert result.error_counts == {"InitialObservationOverflowError": 1, "GroupSkipped": 1}  # never retried


# -- evaluation: the training context budget, checks before loading -----------------------------------------------


def test_evaluation_of_an_env_without_end_stops_at_the_models_maximum_positions(tiny_model_path, tokenizer):
    from transformers import AutoModelForCausalLM

    from trl_envs.hub.model_eval import evaluate_model

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    model.config.max_position_embeddings = limit = 256  # the budget is read from the config: 1024 costs 20 s of CPU
    result = evaluate_model(
        "tiny",
        "reliability_envs:endless",
        model=model,
        tokenizer=tokenizer,
        num_problems=1,
        samples_per_problem=2,
        max_tokens=16,
        max_turns=None,
        temperature=0.0,
    )
    for trajectory in result.groups[0].trajectories:
        last = trajectory.transitions[-1]
        assert len(getattr(last.ob, "tokens", last.ob)) + len(last.ac.tokens) <= limit
        assert trajectory.stop_reason != "done"  # the budget ended it, not the env's own cap


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1.0}, "--temperature -1.0: must be >= 0"),
        ({"samples_per_problem": 1, "ks": [8]}, "--pass_k 8: pass@k needs 1 <= k <= --samples_per_problem"),
        ({"num_problems": 0}, "--num_problems 0: must be an integer >= 1"),
    ],
)
def test_evaluation_settings_are_checked_before_the_model_loads(kwargs, message, monkeypatch):
    from trl_envs.hub import model_loading
    from trl_envs.hub.model_eval import evaluate_model

    monkeypatch.setattr(model_loading, "load_policy", lambda *a, **k: pytest.fail("the model was loaded first"))
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        evaluate_model("some/model", "arithmetic", **kwargs)


def test_a_model_path_must_be_a_folder_but_a_hub_id_stays_a_hub_id(tmp_path):
    (tmp_path / "model.bin").write_text("x")
    with pytest.raises(UsageError, match="is a file; give a model folder"):
        check_model_path(str(tmp_path / "model.bin"))
    with pytest.raises(UsageError, match="'./no-such-model': no such folder"):
        check_model_path("./no-such-model")
    check_model_path("Qwen/Qwen2.5-0.5B-Instruct")
    check_model_path(str(tmp_path))


def test_push_to_hub_checks_the_hub_before_training(tmp_path, monkeypatch):
    import socket

    import huggingface_hub.constants

    from trl_envs import EnvGRPOConfig
    from trl_envs.hub.publish import take_over_push

    with socket.socket() as s:  # a port nothing listens on: the Hub is unreachable
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    args = EnvGRPOConfig(str(tmp_path), use_cpu=True, push_to_hub=True, hub_model_id="me/x", hub_token="hf_bad")
    start = time.monotonic()
    with pytest.raises(UsageError, match="--push_to_hub: cannot create or reach the Hub repo 'me/x' before training"):
        take_over_push(args)
    assert time.monotonic() - start < 60
    with pytest.raises(UsageError):
        check_hub_access("me/x", token="hf_bad")


def test_long_values_are_shortened_in_messages():
    text = shorten("x" * 1_000_000)
    assert len(text) < 300 and "1,000,002 characters" in text


def test_an_unknown_env_is_one_line_but_a_bare_key_error_keeps_its_traceback(capsys):
    from trl_envs.cli.errors import run_command
    from trl_envs.registry import get_env

    assert run_command("prog", lambda: get_env("no_such_env")) == 2
    assert "prog: error: unknown env 'no_such_env'" in capsys.readouterr().err
    with pytest.raises(KeyError):  # a bug, not an input mistake: re-raised with its traceback
        run_command("prog", lambda: {}["missing"])
