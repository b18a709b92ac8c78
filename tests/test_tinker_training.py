"""tinker-cookbook's own envs train unchanged on the tiny model: 3 EnvGRPOTrainer steps and one EnvDPOTrainer round
each, with the env's metrics in the logs (offline; the twenty-questions answerer is scripted)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("tinker_cookbook")

from tinker_cookbook_envs import COOKBOOK_ENVS, make_cookbook_builder, scripted_player  # noqa: E402

from trl_envs import EnvDPOConfig, EnvDPOTrainer, EnvGRPOTrainer  # noqa: E402
from trl_envs.tinker import adapt  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def player(env: str, model_path: str):
    """``None`` (the tiny model samples) or the scripted player (see tests/tinker_cookbook_envs.py)."""
    return scripted_player(model_path) if COOKBOOK_ENVS[env]["scripted"] else None


def params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("env", COOKBOOK_ENVS)
def test_grpo_three_steps_on_a_cookbook_env(env, tiny_model_path, tokenizer, cpu_grpo_config):
    torch.manual_seed(0)
    envs = adapt(make_cookbook_builder(env, tiny_model_path, batch_size=2, group_size=4))
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        cpu_grpo_config(max_steps=3, max_turns=3, max_completion_length=COOKBOOK_ENVS[env]["max_tokens"]),
        envs,
        processing_class=tokenizer,
        sampler=player(env, tiny_model_path),
    )
    before = params(trainer.model)
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in params(trainer.model).items()), "no parameter moved"
    logged = [h for h in trainer.state.log_history if "env/all/reward/total" in h]
    assert len(logged) == 3
    for key in COOKBOOK_ENVS[env]["metrics"]:
        assert key in logged[0], (key, sorted(logged[0]))


@pytest.mark.parametrize("env", COOKBOOK_ENVS)
def test_dpo_round_on_a_cookbook_env(env, tmp_path, tiny_model_path, tokenizer):
    torch.manual_seed(0)
    envs = adapt(make_cookbook_builder(env, tiny_model_path, batch_size=8, group_size=8))
    args = EnvDPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        beta=0.1,
        num_train_epochs=1,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        num_rounds=1,
        max_tokens_per_turn=COOKBOOK_ENVS[env]["max_tokens"],
        max_turns=3,
        eval_envs_each_round=False,
    )
    trainer = EnvDPOTrainer(
        tiny_model_path, args=args, env_dataset=envs, processing_class=tokenizer, sampler=player(env, tiny_model_path)
    )
    before = params(trainer.model)
    trainer.train()
    (round_logs,) = trainer.round_history
    assert round_logs["pairs/groups"] == 8 and round_logs["pairs/pairs"] >= 1, round_logs
    for key in ("round/loss", "round/rewards/margins", *COOKBOOK_ENVS[env]["metrics"]):
        assert key in round_logs, (key, sorted(round_logs))
    assert any(not torch.equal(before[n], p) for n, p in params(trainer.model).items()), "no parameter moved"
