"""A compact one-line-per-log progress report of env rewards for the Trainer."""

from __future__ import annotations

from transformers import TrainerCallback


class RewardProgressCallback(TrainerCallback):
    """Prints ``step N | reward R | turns T | ...`` from the env metrics each time the Trainer logs (main process).

    Args:
        keys: ``(label, metric name)`` pairs to show; missing metrics are left out.
    """

    DEFAULT_KEYS = (
        ("reward", "env/all/reward/total"),
        ("turns", "env/all/turns"),
        ("tokens", "env/all/action_tokens"),
        ("mixed", "env/all/mixed_rewards"),
        ("loss", "loss"),
        ("entropy", "entropy"),
        ("eval_reward", "eval_env/all/reward/total"),
    )

    def __init__(self, keys: tuple[tuple[str, str], ...] = DEFAULT_KEYS):
        self.keys = keys

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        parts = [f"{label} {logs[key]:.3f}" for label, key in self.keys
                 if isinstance(logs.get(key), (int, float))]
        if parts:
            print(f"[trl_envs] step {state.global_step:>4} | " + " | ".join(parts), flush=True)
