"""A run that learns nothing says so: finite-value checks and the training-health watchdog.

* :func:`check_finite_rewards` -- a non-finite reward, or one so large that TRL's float32 group statistics overflow
  (``|r| > MAX_ABS_REWARD``: the square of the deviation from the group mean no longer fits), is an error naming the
  env and the step; so is a non-finite loss or gradient norm (:class:`TrainingHealthCallback`).
* :class:`TrainingHealthCallback` -- each logged training step that cannot teach anything (no group with mixed
  rewards -- unless the step is solved, see :meth:`TrainingHealthCallback.problems` --, every group skipped after
  errors, a zero gradient, collapsed entropy) warns with
  :class:`TrainingHealthWarning`; ``patience`` such steps in a row stop the run with
  :class:`~trl_envs.errors.types.RunFailed` (the scripts then exit 1 without saving a model or writing a card).
* Whatever ``patience`` is (``None`` and values above the run's length included), a run that *mostly trained on
  nothing* -- logged steps in which every group was skipped after env errors or timeouts, so not one row was
  trained -- fails when training ends, the same way. "Mostly" is more than half of its logged training steps
  (:data:`DEAD_SHARE`), or each of its last :data:`DEAD_TAIL_STEPS` logged steps (all of them, when it logged fewer):
  an env server gone for good near the end. Both bounds are fixed, independent of ``patience``: raising ``patience``
  can delay the stop, never turn such a run into a success.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

from transformers import TrainerCallback

from ..errors.types import RunFailed

DEAD_SHARE = 0.5
"""A run fails at its end when more than this share of its logged training steps trained on nothing."""
DEAD_TAIL_STEPS = 10
"""A run fails at its end when each of its last this many logged training steps trained on nothing (all of them,
when it logged fewer)."""

MAX_ABS_REWARD = 1e18
"""Largest reward magnitude whose group statistics stay finite in float32 (TRL's reward tensor): (2e18)^2 < 3.4e38."""


SKIP_CAUSE_HINTS = {
    "InitialObservationOverflowError": "its prompts are over the env's own token budget: raise that budget in the "
    "env's options (--env_kwargs) or shorten the prompts",
    "ContextBudgetError": "its observations outgrow max_context_tokens: raise it (up to the model's maximum positions) "
    "or shorten the env's prompts",
    "RolloutTimeoutError": "its episodes ran past rollout_timeout: raise rollout_timeout, or find what the env "
    "waits on",
    "EnvOutageError": "its server could not be reached: check that it is up (reconnect_timeout_s bounds the wait)",
    "AgentError": "its agent failed: play one task by hand (trl-envs play) to see the agent's error",
}
"""What to change for the most frequent error behind a run's skipped groups, by error type."""

_BOOKKEEPING_ERRORS = ("GroupSkipped", "SiblingEnded")  # counted beside the errors that skipped the groups


class TrainingHealthWarning(UserWarning):
    """A training step that cannot change the policy usefully (see the module docstring)."""


def bad_reward(groups: Sequence, names: Sequence[str], step: int) -> str | None:
    """The message for the first group (named by ``names``) with a non-finite or overflowing total reward, naming
    the step; ``None`` when every reward is fine."""
    for name, group in zip(names, groups):
        if group is None:
            continue
        for i, total in enumerate(group.get_total_rewards()):
            if not math.isfinite(total) or abs(total) > MAX_ABS_REWARD:
                what = (
                    "is not finite"
                    if not math.isfinite(total)
                    else (
                        f"overflows the group statistics (|reward| > {MAX_ABS_REWARD:g}: the reward std would be "
                        "inf and every advantage 0)"
                    )
                )
                return (
                    f"step {step}: {name}, episode {i}: total reward {total!r} {what}. Rescale the env's rewards "
                    "(e.g. to [-1, 1])."
                )
    return None


def check_finite_rewards(groups: Sequence, names: Sequence[str], step: int, accelerator=None) -> None:
    """Raise :class:`RunFailed` with :func:`bad_reward`'s message. With an ``accelerator`` of several processes every
    process raises when any one saw a bad reward (one gather), so none is left waiting in a collective."""
    problem = bad_reward(groups, names, step)
    if accelerator is not None and accelerator.num_processes > 1:
        import torch

        flag = torch.tensor([float(problem is not None)], device=accelerator.device)
        if problem is None and bool(accelerator.gather(flag).max() > 0):
            problem = f"step {step}: another process saw a non-finite or overflowing env reward (see its error)"
        elif problem is not None:
            accelerator.gather(flag)
    if problem is not None:
        raise RunFailed(problem)


class TrainingHealthCallback(TrainerCallback):
    """Watch each logged training step (see the module docstring).

    Args:
        patience: stop after this many unhealthy logged steps in a row (``None``: warn only).
        min_entropy: a mean token entropy below this is a collapsed policy.
        envs: how the training envs are named in messages.
    """

    def __init__(self, patience: int | None = 10, min_entropy: float = 1e-4, envs: str = "the env"):
        self.patience = patience
        self.min_entropy = min_entropy
        self.envs = envs
        self.unhealthy_in_a_row = 0
        self.logged_steps = 0  # training steps logged
        self.empty_steps = 0  # ... in which every group was skipped: nothing was trained
        self.empty_in_a_row = 0
        self.seen_mixed = False  # a step with a mixed-reward group was logged
        self.best_reward: float | None = None  # the best mean env reward logged so far
        self.skip_causes: dict[str, list[float]] = {}  # error type -> its errors per group, in each empty step

    def problems(self, logs: dict) -> list[str]:
        """What is wrong with one training log (empty: healthy).

        A step without mixed-reward groups is not counted when it is *solved*: the run has had mixed groups before
        and this step's mean reward is its best so far (a model that gets every answer right has no advantage left
        to learn from, and that is success). A zero gradient counts only where groups had mixed rewards (without
        them it is their consequence, already counted or solved)."""
        found = []
        skipped, mixed = _number(logs, "env/all/skipped_groups"), _number(logs, "env/all/mixed_rewards")
        grad, entropy = _number(logs, "grad_norm"), _number(logs, "entropy")
        reward = _number(logs, "env/all/reward/total")
        solved = (
            mixed == 0.0
            and self.seen_mixed
            and reward is not None
            and self.best_reward is not None
            and reward >= self.best_reward
        )
        if skipped is not None and skipped >= 1.0:
            found.append("every group was skipped after env errors")
        elif mixed == 0.0 and not solved:
            found.append("no group had mixed rewards, so every advantage is 0")
        if grad == 0.0 and mixed != 0.0:
            found.append("the gradient is zero")
        if entropy is not None and entropy < self.min_entropy:
            found.append(f"the policy's entropy {entropy:.2g} is below {self.min_entropy:g} (collapsed)")
        self.seen_mixed = self.seen_mixed or bool(mixed)
        if reward is not None and (skipped is None or skipped < 1.0):
            self.best_reward = reward if self.best_reward is None else max(self.best_reward, reward)
        return found

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "loss" not in logs:  # only training-step logs (not evaluation or the final summary)
            return
        step = state.global_step
        for key in ("loss", "grad_norm"):
            value = logs.get(key)
            if isinstance(value, (int, float)) and not math.isfinite(value):
                raise RunFailed(
                    f"step {step} on {self.envs}: the {key.replace('_', ' ')} is {value}; training "
                    "cannot go on (check the rewards' scale and the learning rate)"
                )
        found = self.problems(logs)
        self.logged_steps += 1
        skipped = _number(logs, "env/all/skipped_groups")
        empty = skipped is not None and skipped >= 1.0
        self.empty_steps += empty
        if empty:
            for key, value in logs.items():
                name = key[len("env/all/errors/") :]
                if key.startswith("env/all/errors/") and name not in _BOOKKEEPING_ERRORS and _number(logs, key):
                    self.skip_causes.setdefault(name, []).append(float(value))
        self.empty_in_a_row = self.empty_in_a_row + 1 if empty else 0
        if not found:
            self.unhealthy_in_a_row = 0
            return
        self.unhealthy_in_a_row += 1
        limit = f"{self.unhealthy_in_a_row}/{self.patience}" if self.patience else str(self.unhealthy_in_a_row)
        message = (
            f"step {step} on {self.envs} teaches nothing: {'; '.join(found)} ({limit} such steps in a row; "
            "health_patience stops the run)"
        )
        warnings.warn(message, TrainingHealthWarning, stacklevel=2)
        if self.patience is not None and self.unhealthy_in_a_row >= self.patience:
            raise RunFailed(
                f"stopped at step {step}: {self.unhealthy_in_a_row} steps in a row on {self.envs} could "
                f"not teach anything ({'; '.join(found)}). No model was saved and no card written. Check "
                "the env's rewards (they must differ within a group), its errors, and the learning rate; "
                "raise health_patience, or set it to None to only warn."
            )

    def on_train_end(self, args, state, control, **kwargs):
        """Fail a run that mostly trained on nothing (module docstring), whatever ``patience`` is."""
        verdict = self.mostly_empty()
        if verdict is not None:
            raise RunFailed(
                f"training on {self.envs} ended at step {state.global_step}, but in {verdict} every group was "
                f"skipped after env errors or timeouts: nothing was trained. No model was saved and no card written. "
                f"{self.skip_cause()}"
            )

    def skip_cause(self) -> str:
        """The most frequent error behind the empty steps, how often, and what to change (:data:`SKIP_CAUSE_HINTS`)."""
        if not self.skip_causes:
            return (
                "Check the env's errors (an env server that is down, an agent that never returns) and rollout_timeout."
            )
        name, per_group = max(self.skip_causes.items(), key=lambda item: (len(item[1]), sum(item[1])))
        hint = SKIP_CAUSE_HINTS.get(name, "see the env's logged errors (env/all/errors/*) for its message")
        return (
            f"The most frequent cause: {name} on {self.envs}, in {len(per_group)} of the {self.empty_steps} empty "
            f"steps ({sum(per_group) / len(per_group):.2g} per group): {hint}."
        )

    def mostly_empty(self) -> str | None:
        """Where the run so far trained on nothing (``"12 of its 20 logged steps"``, ``"its last 10 logged steps"``),
        when that is more than :data:`DEAD_SHARE` of its logged steps or each of its last :data:`DEAD_TAIL_STEPS`;
        else ``None``."""
        if self.logged_steps == 0:
            return None
        if self.empty_steps > DEAD_SHARE * self.logged_steps:
            return f"{self.empty_steps} of its {self.logged_steps} logged steps"
        if self.empty_in_a_row >= min(DEAD_TAIL_STEPS, self.logged_steps):
            return f"its last {self.empty_in_a_row} logged steps"
        return None


def _number(logs: dict, key: str) -> float | None:
    value = logs.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


__all__ = [
    "DEAD_SHARE",
    "DEAD_TAIL_STEPS",
    "MAX_ABS_REWARD",
    "TrainingHealthCallback",
    "TrainingHealthWarning",
    "bad_reward",
    "check_finite_rewards",
]
