"""scripts/minimal_grpo_loop.py computes the loss (and the gradients) EnvGRPOTrainer computes, on the same batch.

The batch is rolled out once with the tiny model and recorded; the trainer then gets the very same tokens through
its ``sampler=`` argument (a sampler that replays them), so both sides see identical trajectories, rewards and env
masks. The minimal loop's loss is written in plain torch; the trainer's is TRL's ``GRPOTrainer._compute_loss``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import defaultdict, deque
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from trl_envs import (
    EnvGRPOConfig,
    EnvGRPOTrainer,
    HFSampler,
    ListRLDataset,
    RolloutBudget,
    assemble_training_data,
    compute_advantages,
    make_env_dataset,
    run_rollout_batch,
)
from trl_envs.rollout.event_loop import run_sync

pytestmark = pytest.mark.timeout(300)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "minimal_grpo_loop.py"
GROUP_SIZE = 4


def load_minimal_loop():
    spec = importlib.util.spec_from_file_location("minimal_grpo_loop", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


mini = load_minimal_loop()


class RecordingSampler:
    """Samples with ``inner`` and remembers every result under its prompt."""

    def __init__(self, inner):
        self.inner = inner
        self.log: dict[tuple[int, ...], list] = defaultdict(list)

    def sample(self, requests):
        results = self.inner.sample(requests)
        for req, res in zip(requests, results):
            self.log[tuple(req.prompt)].append(res)
        return results


class ReplaySampler:
    """Answers each prompt with what was recorded for it, in recording order (envs of one group share a prompt)."""

    def __init__(self, log):
        self.queues = {prompt: deque(results) for prompt, results in log.items()}

    def sample(self, requests):
        return [self.queues[tuple(req.prompt)].popleft() for req in requests]


def fixed_batch(env, renderer, tokenizer, model_path, temperature, max_tokens, max_turns, seed):
    """One recorded rollout batch (2 groups of GROUP_SIZE) whose groups carry a learning signal."""
    train, _ = run_sync(make_env_dataset(env, renderer, group_size=GROUP_SIZE, batch_size=2, num_batches=50))
    model = AutoModelForCausalLM.from_pretrained(model_path)
    budget = RolloutBudget(max_turns=max_turns, max_tokens_per_turn=max_tokens)
    for index in range(len(train)):
        builders = train.get_batch(index)
        recorder = RecordingSampler(HFSampler(model, tokenizer, temperature=temperature))
        torch.manual_seed(seed + index)
        groups = run_rollout_batch(builders, recorder, budget).groups
        if all(len(set(g.get_total_rewards())) > 1 for g in groups):
            return builders, groups, recorder.log
    raise AssertionError("no batch with a learning signal in every group")


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def both_losses(
    tmp_path,
    model_path,
    tokenizer,
    renderer,
    *,
    env="arithmetic",
    temperature=1.0,
    max_tokens=8,
    max_turns=4,
    seed=0,
    perturb_old_logps=False,
):
    builders, groups, log = fixed_batch(env, renderer, tokenizer, model_path, temperature, max_tokens, max_turns, seed)

    # The minimal loop: advantages, rows, padded batch, loss, backward — on a fresh copy of the model.
    advantages = compute_advantages(groups, loss_fn="dapo")
    rows = assemble_training_data(groups, advantages)
    batch = mini.pad_rows(rows, tokenizer.pad_token_id)
    old_logps = None
    if perturb_old_logps:  # pretend the batch was sampled by an older policy: ratios != 1, some of them clipped
        g = torch.Generator().manual_seed(1)
        model = AutoModelForCausalLM.from_pretrained(model_path)
        with torch.no_grad():
            current, _ = mini.token_logprobs(model, batch, temperature)
        old_logps = current + 0.4 * torch.randn(current.shape, generator=g)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    model.train()
    loss_mini, stats = mini.grpo_loss(model, batch, temperature, epsilon=0.2, old_logps=old_logps)
    loss_mini.backward()

    # EnvGRPOTrainer on the same envs, generating by replaying the recorded tokens.
    config = EnvGRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        num_generations=GROUP_SIZE,
        per_device_train_batch_size=2 * GROUP_SIZE,
        max_steps=1,
        learning_rate=1e-3,
        max_completion_length=max_tokens,
        max_turns=max_turns,
        temperature=temperature,
        beta=0.0,
        seed=0,
        save_strategy="no",
        logging_steps=1,
    )
    assert config.loss_type == "dapo" and config.epsilon == 0.2 and config.num_iterations == 1  # TRL's defaults
    trainer = EnvGRPOTrainer(
        model_path,
        config,
        ListRLDataset(builders, batch_size=len(builders)),
        processing_class=tokenizer,
        sampler=ReplaySampler(log),
    )
    trainer.model.train()
    inputs = trainer.generation_batch(trainer.train_dataset["prompt"])
    # the same batch reached both: tokens, masks, advantages
    assert torch.equal(inputs["completion_ids"], batch.completion_ids)
    assert torch.equal((inputs["completion_mask"] * inputs["tool_mask"]).float(), batch.loss_mask)
    assert torch.allclose(inputs["advantages"].float(), batch.advantages, atol=1e-6)
    if old_logps is not None:
        inputs["old_per_token_logps"] = old_logps
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train's loop; we call compute_loss directly
    loss_trainer = trainer.compute_loss(trainer.model, inputs)
    loss_trainer.backward()
    return loss_mini, stats, grads(model), loss_trainer, trainer, grads(trainer.model)


def assert_same_gradients(g_mini, g_trainer):
    assert g_mini.keys() == g_trainer.keys()
    scale = max(g.abs().max().item() for g in g_trainer.values())
    assert scale > 0, "no gradient at all: the batch carries no signal"
    for name in g_mini:
        diff = (g_mini[name] - g_trainer[name]).abs().max().item()
        assert diff <= 1e-4 * scale, f"{name}: gradients differ by {diff} (scale {scale})"


@pytest.mark.parametrize("env,max_tokens,max_turns", [("arithmetic", 8, 1), ("guess_number", 6, 4)])
def test_minimal_loop_loss_equals_trainer_loss(
    env, max_tokens, max_turns, tmp_path, tiny_model_path, tokenizer, renderer
):
    loss_mini, stats, g_mini, loss_trainer, trainer, g_trainer = both_losses(
        tmp_path, tiny_model_path, tokenizer, renderer, env=env, max_tokens=max_tokens, max_turns=max_turns
    )
    assert loss_mini.item() == pytest.approx(loss_trainer.item(), abs=1e-5)
    assert_same_gradients(g_mini, g_trainer)
    assert stats["entropy"] == pytest.approx(trainer.logged_metrics("train")["entropy"][-1], abs=1e-5)


def test_agreement_with_clipped_ratios_and_temperature(tmp_path, tiny_model_path, tokenizer, renderer):
    loss_mini, stats, g_mini, loss_trainer, trainer, g_trainer = both_losses(
        tmp_path,
        tiny_model_path,
        tokenizer,
        renderer,
        env="guess_number",
        max_tokens=6,
        max_turns=3,
        temperature=0.7,
        seed=5,
        perturb_old_logps=True,
    )
    assert stats["clip_ratio"] > 0, "the perturbation should clip some tokens"
    assert stats["clip_ratio"] == pytest.approx(trainer.logged_metrics("train")["clip_ratio/region_mean"][-1], abs=1e-6)
    assert loss_mini.item() == pytest.approx(loss_trainer.item(), abs=1e-5)
    assert_same_gradients(g_mini, g_trainer)


def test_minimal_loop_trains_evaluates_and_checkpoints(tmp_path, tiny_model_path):
    out = tmp_path / "minimal"
    last = mini.main(
        [
            "--model",
            tiny_model_path,
            "--steps",
            "2",
            "--groups_per_batch",
            "2",
            "--group_size",
            "4",
            "--eval_every",
            "1",
            "--output_dir",
            str(out),
        ]
    )
    assert "eval_reward" in last and -0.1 <= last["eval_reward"] <= 1.0
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in log] == [1, 2]
    trained = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    assert any(not torch.equal(p, q) for p, q in zip(trained.parameters(), base.parameters())), "nothing was trained"
