"""The trainer's seed reaches an env dataset builder whose seed the user left unset."""

import dataclasses
import warnings

import pytest

from trl_envs.core.types import RLDatasetBuilder
from trl_envs.envs.arithmetic import ArithmeticDatasetBuilder
from trl_envs.rollout.event_loop import run_sync
from trl_envs.trainers.dataset_seed import seed_dataset_builder


def _questions(builder) -> list[str]:
    train, _ = run_sync(builder)
    return [(b.a, b.b) for i in range(3) for b in train.get_batch(i)]


def test_unset_seed_takes_the_trainers(renderer):
    builder = ArithmeticDatasetBuilder(renderer, batch_size=4, group_size=2, num_batches=3)
    assert builder.seed is None
    seeded = [seed_dataset_builder(builder, s, "T") for s in (0, 1)]
    assert [b.seed for b in seeded] == [0, 1]
    assert _questions(seeded[0]) != _questions(seeded[1])  # two training seeds, two problem sequences
    assert _questions(builder) == _questions(seeded[0])  # alone, an unset seed is 0


def test_a_seed_the_user_set_is_kept(renderer):
    builder = ArithmeticDatasetBuilder(renderer, batch_size=4, group_size=2, num_batches=3, seed=7)
    assert seed_dataset_builder(builder, 1, "T").seed == 7


@dataclasses.dataclass
class _FixedSeedBuilder(RLDatasetBuilder):
    seed: int = 0

    async def __call__(self):
        raise NotImplementedError


def test_a_default_seed_that_differs_from_the_trainers_warns():
    with pytest.warns(UserWarning, match=r"_FixedSeedBuilder.seed is its default 0 while the trainer's seed is 3"):
        assert seed_dataset_builder(_FixedSeedBuilder(), 3, "EnvGRPOTrainer").seed == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        seed_dataset_builder(_FixedSeedBuilder(), 0, "EnvGRPOTrainer")  # the same seed: nothing to say


def test_grpo_trainer_passes_its_seed(tiny_model_path, tokenizer, renderer, cpu_grpo_config):
    from trl_envs import EnvGRPOTrainer

    builder = ArithmeticDatasetBuilder(renderer, batch_size=2, group_size=4, num_batches=3)
    firsts = []
    for seed in (0, 5):
        trainer = EnvGRPOTrainer(
            tiny_model_path, cpu_grpo_config(seed=seed), env_dataset=builder, processing_class=tokenizer
        )
        groups = [trainer.env_group(k) for k in trainer.train_dataset["prompt"][:6]]
        firsts.append([(g.a, g.b) for g in groups])
    assert firsts[0] != firsts[1]
