# Copyright the trl_envs authors. Apache-2.0.
"""A minimal GRPO loop on a trl_envs environment, in plain PyTorch (no Trainer). Read it top to bottom.

    python scripts/minimal_grpo_loop.py               # arithmetic 0..3, offline tiny model, CPU, under a minute
    python scripts/minimal_grpo_loop.py --env guess_number --max_tokens 8 --max_turns 6

The defaults are those of ``scripts/train_grpo.py``'s default run (60 steps of 4 groups of 8, learning rate 1e-3).

Each step:

1. take a batch of env groups (``EnvGroupBuilder`` s) from the ``RLDataset``;
2. roll them out: all episodes play concurrently, with one batched ``generate`` per turn
   (``run_rollout_batch`` + ``HFSampler``);
3. advantages: each trajectory's total reward minus its group's mean, divided by the group's std + 1e-4
   (``compute_advantages``);
4. training rows: prompt = first observation, completion = sampled tokens and the env tokens between them,
   mask = 1 exactly on sampled tokens (``assemble_training_data``);
5. one optimiser step on the clipped policy-gradient loss, normalised like TRL's default ``loss_type="dapo"``:
   the sum of the per-token losses over every sampled token of the batch, divided by the number of those tokens;
6. every ``--eval_every`` steps and at the end: evaluate on the test envs (greedy) and save a checkpoint.

On the same batch with the same settings, ``grpo_loss`` below gives the loss (and gradients) that ``EnvGRPOTrainer``
computes through TRL's ``GRPOTrainer`` (checked by tests/test_minimal_loop.py), so this file is also a readable
specification of what the trainer optimises. What the trainer adds: distributed training (accelerate, DeepSpeed,
FSDP), vLLM generation, LoRA, a KL penalty against a reference model, the other loss types, gradient accumulation,
logging integrations and resumable checkpoints.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trl_envs import (
    HFSampler,
    Renderer,
    RolloutBudget,
    TrainingRow,
    assemble_training_data,
    compute_advantages,
    make_env_dataset,
    run_rollout_batch,
)
from trl_envs.rollout.evaluation import evaluate
from trl_envs.rollout.event_loop import run_sync
from trl_envs.tiny_model import build_tiny_model


@dataclass
class Args:
    env: str = "arithmetic"  # built-in env: arithmetic | guess_number
    model: str = ""  # hub id or path; empty: the offline tiny chat model
    output_dir: str = "outputs/minimal-grpo"
    steps: int = 60  # rollout batches, one optimiser step each (TRL: max_steps)
    groups_per_batch: int = 4  # env groups per batch
    group_size: int = 8  # envs per group (TRL: num_generations); batch rows = groups_per_batch * group_size
    learning_rate: float = 1e-3  # AdamW, linear decay to 0 (the Trainer's default schedule)
    max_grad_norm: float = 1.0
    temperature: float = 1.0  # sampling temperature; the loss scores tokens at the same temperature
    epsilon: float = 0.2  # PPO clip range (TRL: epsilon = epsilon_high = 0.2)
    max_tokens: int = 16  # sampled tokens per turn (TRL: max_completion_length)
    max_turns: int = 8  # actions per episode
    max_operand: int = 3  # arithmetic: operands 0..max_operand (scripts/train_grpo.py's default run)
    eval_every: int = 20  # evaluate and checkpoint every N steps (and at the end)
    seed: int = 0


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for f in dataclasses.fields(Args):
        parser.add_argument(f"--{f.name}", type=type(f.default), default=f.default)
    return Args(**vars(parser.parse_args(argv)))


# -- the batch: training rows as padded tensors ----------------------------------------------------------------


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, P + T): prompts left-padded to P, completions right-padded to T
    attention_mask: torch.Tensor  # (B, P + T): 1 on real tokens (prompt, sampled and env tokens)
    completion_ids: torch.Tensor  # (B, T)
    loss_mask: torch.Tensor  # (B, T): 1 on sampled tokens only (not env tokens, not padding)
    advantages: torch.Tensor  # (B,)


def pad_rows(rows: list[TrainingRow], pad_token_id: int, device: str | torch.device = "cpu") -> Batch:
    """TRL's layout: every completion starts at column P, so one slice of the logits scores all of them."""
    P = max(len(r.prompt_ids) for r in rows)
    T = max(len(r.completion_ids) for r in rows)
    input_ids = torch.full((len(rows), P + T), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), P + T), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), T))
    for i, row in enumerate(rows):
        p, c = len(row.prompt_ids), len(row.completion_ids)
        input_ids[i, P - p : P] = torch.tensor(row.prompt_ids)
        input_ids[i, P : P + c] = torch.tensor(row.completion_ids)
        attention_mask[i, P - p : P + c] = 1
        loss_mask[i, :c] = torch.tensor(row.mask, dtype=torch.float)
    advantages = torch.tensor([row.advantage for row in rows], dtype=torch.float)
    return Batch(
        input_ids.to(device),
        attention_mask.to(device),
        input_ids[:, P:].to(device),
        loss_mask.to(device),
        advantages.to(device),
    )


# -- the loss --------------------------------------------------------------------------------------------------


def token_logprobs(model, batch: Batch, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability (B, T) of each completion token, and the entropy (B, T) of the distribution it was drawn
    from, both under ``softmax(logits / temperature)`` — the distribution the sampler drew from."""
    T = batch.completion_ids.shape[1]
    # The logits at position k predict token k + 1: keep the T + 1 last positions and drop the very last.
    logits = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False, logits_to_keep=T + 1
    ).logits[:, :-1]
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)  # (B, T, vocab)
    logps = logp_all.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logps, entropy


def grpo_loss(
    model, batch: Batch, temperature: float, epsilon: float = 0.2, old_logps: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped policy-gradient (PPO/GRPO) loss, aggregated as TRL's ``loss_type="dapo"``.

    per-token loss = -min(ratio * A, clip(ratio, 1 - epsilon, 1 + epsilon) * A), ratio = exp(logp - logp_old);
    loss = sum over the sampled tokens of the batch / their number. With ``old_logps=None`` (one update per fresh
    batch, as TRL with ``num_iterations=1``) logp_old is logp itself, detached: the ratio is exactly 1 and the
    gradient is the plain policy gradient -A * grad(logp), averaged over tokens.
    """
    logps, entropy = token_logprobs(model, batch, temperature)
    if old_logps is None:
        old_logps = logps.detach()
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
    adv = batch.advantages.unsqueeze(1)  # one advantage per row, for every token of the row
    per_token_loss = -torch.min(ratio * adv, clipped * adv)
    mask = batch.loss_mask
    n_tokens = mask.sum().clamp(min=1.0)
    loss = (per_token_loss * mask).sum() / n_tokens
    with torch.no_grad():
        was_clipped = ((ratio < 1 - epsilon) & (adv < 0)) | ((ratio > 1 + epsilon) & (adv > 0))
        stats = {
            "entropy": ((entropy * mask).sum() / n_tokens).item(),
            "clip_ratio": ((was_clipped.float() * mask).sum() / n_tokens).item(),
        }
    return loss, stats


# -- the loop --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"

    # The model and the envs: a built-in env's dataset builder makes (train, test) RLDatasets of env groups.
    model_path = args.model or build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path).to(device)
    renderer = Renderer(tokenizer)
    env_kwargs = {"max_operand": args.max_operand} if args.env == "arithmetic" else {}
    train_set, _ = run_sync(
        make_env_dataset(
            args.env,
            renderer,
            group_size=args.group_size,
            batch_size=args.groups_per_batch,
            num_batches=args.steps,
            **env_kwargs,
        )
    )
    # Greedy evaluation plays each test problem once: the same test problems, in groups of one.
    _, test_set = run_sync(
        make_env_dataset(args.env, renderer, group_size=1, batch_size=args.groups_per_batch, **env_kwargs)
    )
    budget = RolloutBudget(max_turns=args.max_turns, max_tokens_per_turn=args.max_tokens)
    sampler = HFSampler(model, tokenizer, temperature=args.temperature)
    greedy = HFSampler(model, tokenizer, temperature=0.0)

    # AdamW without weight decay and a linear decay to 0: the transformers Trainer's defaults.
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, 1 - step / args.steps))
    os.makedirs(args.output_dir, exist_ok=True)
    log_file = open(os.path.join(args.output_dir, "log.jsonl"), "w")
    last: dict[str, float] = {}

    for step in range(1, args.steps + 1):
        start = time.perf_counter()

        # 1-2. Roll out one batch of groups with the current policy.
        builders = train_set.get_batch((step - 1) % len(train_set))
        rollout = run_rollout_batch(builders, sampler, budget)
        groups = [g for g in rollout.groups if g is not None]  # None: a group skipped after env errors

        # 3-4. Advantages (group-normalised) and masked training rows.
        advantages = compute_advantages(groups, loss_fn="dapo")
        rows = assemble_training_data(groups, advantages)
        batch = pad_rows(rows, tokenizer.pad_token_id, device)

        # 5. One policy-gradient step.
        model.train()
        loss, stats = grpo_loss(model, batch, args.temperature, args.epsilon)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        schedule.step()

        rewards = [r for g in groups for r in g.get_total_rewards()]
        last = {
            "step": step,
            "reward": sum(rewards) / len(rewards),
            "loss": loss.item(),
            **stats,
            "mixed": sum(len(set(g.get_total_rewards())) > 1 for g in groups) / len(groups),
            "turns": sum(len(t.transitions) for g in groups for t in g.trajectories) / len(rewards),
            "grad_norm": grad_norm.item(),
            "seconds": time.perf_counter() - start,
        }

        # 6. Evaluate (greedy, on the test envs) and checkpoint.
        if step % args.eval_every == 0 or step == args.steps:
            last["eval_reward"] = evaluate(greedy, test_set, budget=budget).mean_reward
            model.save_pretrained(args.output_dir)
            tokenizer.save_pretrained(args.output_dir)
        print(" | ".join([f"step {step:>4}"] + [f"{k} {v:.3f}" for k, v in last.items() if k != "step"]), flush=True)
        log_file.write(json.dumps(last) + "\n")

    log_file.close()
    print(f"saved to {args.output_dir}")
    return last


if __name__ == "__main__":
    main()
