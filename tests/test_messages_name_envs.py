"""Messages name the env as the user wrote it and say why a run trained on nothing: the health watchdog names the
env by its name, a run whose groups were all skipped names the most frequent error and what to change, and TRL's
per-step "All reward functions returned None" block becomes one line."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from trl_envs.errors.types import RunFailed
from trl_envs.registry import make_env_dataset
from trl_envs.registry.names import env_label
from trl_envs.rollout.event_loop import run_sync
from trl_envs.trainers.health import TrainingHealthCallback, TrainingHealthWarning
from trl_envs.trainers.trl_warnings import REWARD_NONE_LINE, TRL_GRPO_LOGGER, replace_trl_reward_none_warning


def test_envs_made_by_name_are_named_as_written(renderer):
    builder = make_env_dataset("reasoning_gym/basic_arithmetic", renderer) if _has("reasoning_gym") else None
    arithmetic = make_env_dataset("arithmetic", renderer)
    train, _ = run_sync(arithmetic)
    first = train.get_batch(0)[0]
    assert env_label(arithmetic, first) == "arithmetic"
    if builder is not None:
        assert env_label(builder) == "reasoning_gym/basic_arithmetic"
    assert env_label(train, first) == "arithmetic"  # not made by name: its groups' logging tag
    assert env_label(object()) == "object"


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def empty_step(callback, step, errors):
    logs = {"loss": 0.0, "env/all/skipped_groups": 1.0, "env/all/errors/GroupSkipped": 1.0}
    logs |= {f"env/all/errors/{name}": value for name, value in errors.items()}
    with pytest.warns(TrainingHealthWarning, match=f"step {step} on verifiers/vf_sums teaches nothing"):
        callback.on_log(None, SimpleNamespace(global_step=step), None, logs=logs)


def test_a_run_that_trained_on_nothing_names_its_most_frequent_error_and_the_fix():
    callback = TrainingHealthCallback(patience=None, envs="verifiers/vf_sums")
    empty_step(callback, 1, {"InitialObservationOverflowError": 1.0})
    empty_step(callback, 2, {"InitialObservationOverflowError": 1.0, "RolloutTimeoutError": 0.5})
    with pytest.raises(RunFailed) as failed:
        callback.on_train_end(None, SimpleNamespace(global_step=2), None)
    message = str(failed.value)
    assert "training on verifiers/vf_sums ended at step 2" in message
    assert "The most frequent cause: InitialObservationOverflowError on verifiers/vf_sums, in 2 of the 2" in message
    assert "over the env's own token budget: raise that budget in the env's options (--env_kwargs)" in message
    assert "\n" not in message


def test_trl_reward_none_block_becomes_one_line(caplog):
    replace_trl_reward_none_warning()
    replace_trl_reward_none_warning()  # idempotent: one filter
    log = logging.getLogger(TRL_GRPO_LOGGER)
    assert len(log.filters) == 1
    with caplog.at_level(logging.WARNING, logger=TRL_GRPO_LOGGER):
        log.warning(
            "[RANK 0] All reward functions returned None for the following kwargs:\n{'prompt': 'x'}\n"
            "Please ensure that at least one reward function returns a valid reward."
        )
        log.warning("something else")
    assert [r.getMessage() for r in caplog.records] == [REWARD_NONE_LINE, "something else"]
