"""A compact one-line-per-log progress report of env rewards for the Trainer."""

from __future__ import annotations

from collections import deque

from transformers import TrainerCallback


class RewardProgressCallback(TrainerCallback):
    """Prints ``step N | reward R (avg A) | turns T | ...`` from the env metrics each time the Trainer logs (main
    process). ``avg`` is the mean reward of the last ``window`` logs: single-step rewards of small batches are noisy.

    Args:
        keys: ``(label, metric name)`` pairs to show; missing metrics are left out.
        window: how many logged rewards the running average covers.
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

    def __init__(self, keys: tuple[tuple[str, str], ...] = DEFAULT_KEYS, window: int = 10):
        self.keys = keys
        self.recent: deque[float] = deque(maxlen=window)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        parts = []
        for label, key in self.keys:
            value = logs.get(key)
            if not isinstance(value, (int, float)):
                continue
            parts.append(f"{label} {value:.3f}")
            if key == "env/all/reward/total":
                self.recent.append(value)
                parts[-1] += f" (avg {sum(self.recent) / len(self.recent):.3f})"
        if parts:
            print(f"[trl_envs] step {state.global_step:>4} | " + " | ".join(parts), flush=True)
