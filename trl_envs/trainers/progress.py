"""Progress of a training run: a compact one-line-per-log report of env rewards (:class:`RewardProgressCallback`) and
a step counter with elapsed time and ETA (:class:`StepProgressCallback`)."""

from __future__ import annotations

import sys
from collections import deque
from typing import TextIO

from tqdm.auto import tqdm
from transformers import TrainerCallback

from ..terminal import terminal_stream

STEP_BAR_FORMAT = "step {n_fmt}/{total_fmt} · {elapsed} elapsed · ETA {remaining}"
"""The step counter: ``step 12/150 · 00:21 elapsed · ETA 02:30``."""


class StepProgressCallback(TrainerCallback):
    """A tqdm counter of optimizer steps, ``step 12/150 · 00:21 elapsed · ETA 02:30``, on the main process.

    Args:
        enabled: draw it; ``None`` (default): only when stderr or stdout is a terminal (:func:`terminal_stream`). Off,
            the callback does nothing.
        file: where to draw it (default: the terminal's stream, else ``sys.stderr``).

    It replaces the Trainer's own bar (``transformers.ProgressCallback``): remove that one when adding this one
    (:func:`use_step_progress` does both).
    """

    def __init__(self, enabled: bool | None = None, file: TextIO | None = None):
        terminal = terminal_stream()
        self.file = file if file is not None else terminal or sys.stderr
        self.enabled = (terminal is not None if file is None else self.file.isatty()) if enabled is None else enabled
        self.bar: tqdm | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.enabled and state.is_world_process_zero and state.max_steps > 0:
            self.bar = tqdm(
                total=state.max_steps,
                initial=state.global_step,
                bar_format=STEP_BAR_FORMAT,
                file=self.file,
                dynamic_ncols=True,
                mininterval=0.0,
                leave=True,
            )

    def on_step_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.update(state.global_step - self.bar.n)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def use_step_progress(trainer, enabled: bool | None = None) -> StepProgressCallback:
    """Give ``trainer`` a :class:`StepProgressCallback` (``enabled`` as there) instead of its own progress bar."""
    from transformers import ProgressCallback

    callback = StepProgressCallback(enabled)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(callback)
    return callback


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
        if parts:  # through tqdm, so that a progress bar on the same terminal is redrawn below the line
            tqdm.write(f"[trl_envs] step {state.global_step:>4} | " + " | ".join(parts), file=sys.stdout)
            sys.stdout.flush()
