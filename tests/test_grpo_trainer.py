"""EnvGRPOTrainer end to end on the tiny model: training, rewards, masks, LoRA, loss types, evaluation, errors."""

from __future__ import annotations

import pytest
import torch
from cpu_configs import cpu_grpo_config

from trl_envs import EnvGRPOConfig, EnvGRPOTrainer, ListRLDataset, make_env_dataset
from trl_envs.rollout.event_loop import run_sync

pytestmark = pytest.mark.timeout(300)


def config(tmp_path, **overrides) -> EnvGRPOConfig:
    return cpu_grpo_config(tmp_path, **{"per_device_eval_batch_size": 8, "max_steps": 2, **overrides})


def env_builder(name, renderer, group_size=4, **kwargs):
    return make_env_dataset(name, renderer, group_size=group_size, batch_size=2, num_batches=20, **kwargs)


def params_snapshot(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("env", ["arithmetic", "guess_number"])
def test_training_steps_update_the_model_and_log_env_metrics(env, tmp_path, tiny_model_path, tokenizer, renderer):
    trainer = EnvGRPOTrainer(tiny_model_path, config(tmp_path), env_builder(env, renderer), processing_class=tokenizer)
    before = params_snapshot(trainer.model)
    trainer.train()
    after = params_snapshot(trainer.model)
    assert any(not torch.equal(before[n], after[n]) for n in before), "no parameter moved"
    logged = [h for h in trainer.state.log_history if "env/all/reward/total" in h]
    assert len(logged) == 2
    assert f"env/{env}/reward/total" in logged[0]
    if env == "guess_number":
        assert logged[0]["env/all/turns"] > 1  # multi-turn episodes were trained
        assert "env/guess_number/parse_ok" in logged[0]  # a step metric of the env, per tag


def test_reward_seen_by_trl_equals_env_totals(tmp_path, tiny_model_path, tokenizer, renderer):
    trainer = EnvGRPOTrainer(
        tiny_model_path, config(tmp_path), env_builder("guess_number", renderer), processing_class=tokenizer
    )
    trainer.model.train()
    out = trainer.generation_batch(trainer.train_dataset["prompt"][:2])
    totals = [t for g in trainer.last_rollout.groups for t in g.get_total_rewards()]
    step_plus_group = [
        tr.step_reward + gr for g in trainer.last_rollout.groups for tr, gr in zip(g.trajectories, g.group_rewards)
    ]
    assert trainer.logged_completions()["rewards"]["env"] == pytest.approx(totals)
    assert totals == pytest.approx(step_plus_group)
    # and the advantages TRL trains on are the group-normalised env totals
    r = torch.tensor(totals).view(-1, 4)
    expected = ((r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + 1e-4)).flatten()
    assert torch.allclose(out["advantages"].float(), expected.float(), atol=1e-4)


def test_env_tokens_receive_no_gradient(tmp_path, tiny_model_path, tokenizer, renderer):
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, per_device_train_batch_size=4, max_turns=6),
        env_builder("guess_number", renderer),
        processing_class=tokenizer,
    )
    trainer.model.train()
    torch.manual_seed(3)
    inputs = None
    for key in trainer.train_dataset["prompt"][:20]:  # find a group with a learning signal
        inputs = trainer.generation_batch([key])
        if inputs["advantages"].abs().sum() > 0 and (inputs["tool_mask"] == 0).any():
            break
    assert inputs["advantages"].abs().sum() > 0 and (inputs["tool_mask"] == 0).any()

    # the gradient of the loss w.r.t. the final hidden states (B, L, hidden): position k predicts token k + 1, and
    # nothing but the LM head reads them, so a token gets no gradient iff the position before it gets none
    grads = []

    def keep_grad(module, args, output):
        if output.requires_grad:
            output.register_hook(grads.append)

    hook = trainer.model.get_decoder().norm.register_forward_hook(keep_grad)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train's loop; we call compute_loss directly
    try:
        loss = trainer.compute_loss(trainer.model, inputs)
        loss.backward()
    finally:
        hook.remove()
    assert len(grads) == 1, len(grads)  # one forward pass over the batch
    width = inputs["completion_ids"].size(1)
    grad = grads[0][:, -(width + 1) : -1].abs().sum(-1)  # (B, T): per completion token
    trained = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
    env_positions = (inputs["completion_mask"].bool()) & ~inputs["tool_mask"].bool()
    assert env_positions.any()
    assert torch.all(grad[env_positions] == 0), "env tokens got a gradient"
    assert grad[trained].abs().sum() > 0, "sampled tokens got no gradient"


def test_lora_with_kl_penalty_trains_only_the_adapter(tmp_path, tiny_model_path, tokenizer, renderer):
    from peft import LoraConfig

    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, beta=0.1),
        env_builder("arithmetic", renderer),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    base_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora" not in n}
    trainer.train()
    assert all(torch.equal(p, base_before[n]) for n, p in trainer.model.named_parameters() if "lora" not in n)
    assert any("kl" in h for h in trainer.state.log_history)
    trainer.save_model(str(tmp_path / "adapter"))
    assert (tmp_path / "adapter" / "adapter_config.json").exists()


@pytest.mark.parametrize("loss_type", ["dr_grpo", "cispo"])
def test_other_loss_types_train(loss_type, tmp_path, tiny_model_path, tokenizer, renderer):
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, loss_type=loss_type, max_steps=1),
        env_builder("arithmetic", renderer),
        processing_class=tokenizer,
    )
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))


def test_evaluation_runs_the_test_envs(tmp_path, tiny_model_path, tokenizer, renderer):
    trainer = EnvGRPOTrainer(
        tiny_model_path, config(tmp_path, max_steps=1), env_builder("arithmetic", renderer), processing_class=tokenizer
    )
    metrics = trainer.evaluate()
    assert "eval_env/all/reward/total" in metrics
    assert -0.1 <= metrics["eval_env/all/reward/total"] <= 1.0


def test_only_training_batches_are_recorded_and_announced(tmp_path, tiny_model_path, tokenizer, renderer):
    trainer = EnvGRPOTrainer(
        tiny_model_path, config(tmp_path, max_steps=2), env_builder("arithmetic", renderer), processing_class=tokenizer
    )
    announced = []
    trainer.rollouts.add_listener(announced.append)
    trainer.train()
    assert len(announced) == 2 and trainer.last_rollout is announced[-1]  # one rollout per step's generation batch
    trainer.evaluate()  # rolls out the test envs: neither recorded as the latest training rollout nor announced
    assert len(announced) == 2 and trainer.last_rollout is announced[-1]


def test_skipped_groups_are_not_trained(tmp_path, tiny_model_path, tokenizer, renderer):
    from trl_envs import EnvGroupBuilder

    class BrokenBuilder(EnvGroupBuilder):
        def __init__(self, inner):
            self.inner = inner

        async def make_envs(self):
            envs = await self.inner.make_envs()

            class Boom(type(envs[0])):
                async def step(self, action, *, extra=None):
                    raise ConnectionError("grader unreachable")

            for e in envs:
                e.__class__ = Boom
            return envs

    train, _ = run_sync(env_builder("arithmetic", renderer))
    broken = ListRLDataset([BrokenBuilder(b) for b in train.get_batch(0)], batch_size=2)
    trainer = EnvGRPOTrainer(
        tiny_model_path,
        config(tmp_path, rollout_error_strategy="retry", rollout_max_retries=1),
        broken,
        processing_class=tokenizer,
    )
    trainer.model.train()
    out = trainer.generation_batch(trainer.train_dataset["prompt"][:2])
    assert trainer.last_rollout.groups == [None, None]
    assert trainer.last_rollout.error_counts["ConnectionError"] >= 4  # at least 1 try + 1 retry, per group
    assert trainer.last_rollout.error_counts["GroupSkipped"] == 2
    assert torch.all(out["advantages"] == 0)
    assert torch.all(out["completion_mask"] * out["tool_mask"] == 0)


# -- errors ----------------------------------------------------------------------------------------------------


def test_group_size_must_equal_num_generations(tmp_path, tiny_model_path, tokenizer, renderer):
    """Refused when the trainer is built (before any training or evaluation), naming the builder and its row."""
    with pytest.raises(
        ValueError,
        match=r"ArithmeticGroupBuilder \(row train/0/0\) made 2 envs but the group size \(num_generations\) is 4",
    ):
        EnvGRPOTrainer(
            tiny_model_path,
            config(tmp_path),
            env_builder("arithmetic", renderer, group_size=2),
            processing_class=tokenizer,
        )


def test_groups_must_not_straddle_ranks(tmp_path, tiny_model_path, tokenizer, renderer, monkeypatch):
    # Two ranks with 2 rows each: the global batch (4) holds one group of 4, but it would be split across ranks.
    monkeypatch.setattr(EnvGRPOConfig, "world_size", property(lambda self: 2))
    with pytest.raises(ValueError, match=r"2 processes = 2 rows\) is not a multiple of num_generations=4"):
        EnvGRPOTrainer(
            tiny_model_path,
            config(tmp_path, per_device_train_batch_size=2),
            env_builder("arithmetic", renderer),
            processing_class=tokenizer,
        )


def test_tokenizer_without_chat_template_is_rejected(tmp_path, tiny_model_path, tokenizer, renderer):
    from transformers import AutoTokenizer

    bare = AutoTokenizer.from_pretrained(tiny_model_path)
    bare.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        EnvGRPOTrainer(tiny_model_path, config(tmp_path), env_builder("arithmetic", renderer), processing_class=bare)
