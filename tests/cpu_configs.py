"""The ``EnvGRPOConfig`` the tests train with: the tiny model on a CPU in seconds."""

from __future__ import annotations


def cpu_grpo_config(tmp_path, **overrides):
    """An ``EnvGRPOConfig`` with output under ``tmp_path / "out"``, one training step, groups of 4, 8 rows per device,
    8 tokens per turn, 4 turns, no KL; keywords override any of it."""
    from trl_envs import EnvGRPOConfig

    defaults = dict(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        gradient_checkpointing=False,
        num_generations=4,
        per_device_train_batch_size=8,
        max_steps=1,
        max_completion_length=8,
        max_turns=4,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        seed=0,
        beta=0.0,
    )
    return EnvGRPOConfig(**{**defaults, **overrides})
