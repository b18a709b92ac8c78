"""The training problems and their order follow the training seed; the held-out problems do not."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from trl_envs import make_env_dataset
from trl_envs.core.types import TEST_SEED_OFFSET
from trl_envs.rollout.event_loop import run_sync

REPO = Path(__file__).resolve().parents[1]


def problems(dataset, num_batches=6):
    return [g.to_row() for i in range(min(num_batches, len(dataset))) for g in dataset.get_batch(i)]


def splits(seed, **kwargs):
    builder = make_env_dataset(
        "arithmetic",
        kwargs.pop("renderer"),
        group_size=4,
        groups_per_batch=4,
        num_batches=20,
        defaults={"seed": seed},
        **kwargs,
    )
    train, test = run_sync(builder)
    return problems(train), problems(test)


def test_training_problems_follow_the_seed_and_the_test_set_stays(renderer):
    train0, test0 = splits(0, renderer=renderer)
    train0_again, test0_again = splits(0, renderer=renderer)
    train1, test1 = splits(1, renderer=renderer)
    assert train0 == train0_again and test0 == test0_again  # exactly reproducible for a given seed
    assert train0 != train1  # another seed trains on another sequence
    assert test0 == test1  # the held-out problems do not depend on the training seed


def test_a_training_seed_equal_to_the_test_seed_is_refused(renderer):
    with pytest.raises(ValueError, match="training would replay the held-out problems"):
        make_env_dataset("arithmetic", renderer, seed=TEST_SEED_OFFSET)


def test_cartpole_test_episodes_do_not_follow_the_training_seed(renderer):
    pytest.importorskip("gymnasium")
    seeds = {}
    for seed in (0, 7):
        train, test = run_sync(make_env_dataset("cartpole", renderer, batch_size=2, num_batches=3, seed=seed))
        seeds[seed] = (
            [b.seed for i in range(len(train)) for b in train.get_batch(i)],
            [b.seed for i in range(len(test)) for b in test.get_batch(i)],
        )
    assert seeds[0][0] != seeds[7][0] and seeds[0][1] == seeds[7][1]


class _Stop(Exception):
    pass


def test_train_grpo_script_trains_each_seed_on_its_own_problems(tiny_model_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("train_grpo_order", REPO / "scripts" / "train_grpo.py")
    script = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, script)
    spec.loader.exec_module(script)
    seen = {}

    def capture(*, env_dataset, **kwargs):
        seen["splits"] = tuple(problems(d) for d in run_sync(env_dataset))
        raise _Stop

    monkeypatch.setattr(script, "EnvGRPOTrainer", capture)
    runs = {}
    for seed in ("0", "1"):
        monkeypatch.setattr(sys, "argv", ["train_grpo.py", "--model_name_or_path", tiny_model_path, "--seed", seed])
        with pytest.raises(_Stop):
            script.main(*script.make_parser().parse_args_and_config())
        runs[seed] = seen["splits"]
    assert runs["0"][0] != runs["1"][0] and runs["0"][1] == runs["1"][1]
