"""What the env trainers share: their rollout component (trl_envs/trainers/rollouts.py), their setup
(trl_envs/trainers/env_setup.py) and the one rollout budget of their configs."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from trl_envs import EnvDPOConfig, EnvGRPOConfig
from trl_envs.trainers import env_setup, rollouts
from trl_envs.trainers.rollouts import EnvRollouts


class _Trainer:
    def __init__(self, args):
        self.args = args
        self.model_wrapped = torch.nn.Linear(2, 2)
        self.accelerator = SimpleNamespace(
            state=SimpleNamespace(deepspeed_plugin=None, fsdp_plugin=None), autocast=contextlib.nullcontext
        )


@pytest.mark.parametrize("config_class", [EnvDPOConfig, EnvGRPOConfig])
@pytest.mark.parametrize("gather", [True, False])
def test_generation_model_honours_ds3_gather_for_generation(monkeypatch, tmp_path, config_class, gather):
    seen = {}

    @contextlib.contextmanager
    def fake_unwrap(model, accelerator, gather_deepspeed3_params=True, gradient_checkpointing_kwargs=None):
        seen["gather"] = gather_deepspeed3_params
        yield model

    monkeypatch.setattr(rollouts, "unwrap_model_for_generation", fake_unwrap)
    args = config_class(output_dir=str(tmp_path), use_cpu=True, report_to="none", ds3_gather_for_generation=gather)
    trainer = _Trainer(args)
    with EnvRollouts(trainer).generation_model() as model:
        assert model is trainer.model_wrapped
    assert seen == {"gather": gather}


def test_one_rollout_budget_for_both_configs(tmp_path):
    grpo = EnvGRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to="none",
        max_completion_length=9,
        max_turns=3,
        max_tokens_per_trajectory=20,
    )
    assert (grpo.rollout_budget().max_tokens_per_turn, grpo.rollout_budget().max_turns) == (9, 3)
    assert grpo.rollout_budget().max_tokens_per_trajectory == 20
    grpo.max_tokens_per_turn = 5
    assert grpo.rollout_budget().max_tokens_per_turn == 5
    dpo = EnvDPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", max_tokens_per_turn=7, max_turns=2)
    assert (dpo.rollout_budget().max_tokens_per_turn, dpo.rollout_budget().max_turns) == (7, 2)


def test_env_dataset_of_the_wrong_type_names_the_trainer_and_what_it_accepts():
    accepted = "an RLDataset, RLDatasetBuilder or datasets.Dataset of env rows"
    with pytest.raises(TypeError, match=f"EnvDPOTrainer: env_dataset must be {accepted}, got list"):
        env_setup.resolve_env_datasets([], None, "EnvDPOTrainer")


def test_tokenizer_without_chat_template_is_refused_by_name():
    tokenizer = SimpleNamespace(chat_template=None, name_or_path="plain-lm")
    with pytest.raises(ValueError, match="EnvGRPOTrainer: the tokenizer 'plain-lm' has no chat template"):
        env_setup.require_chat_template(tokenizer, "EnvGRPOTrainer")
