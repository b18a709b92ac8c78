"""Rollout settings shared by the env trainers' configs (``EnvGRPOConfig``, ``EnvDPOConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..rollout.engine import ErrorStrategy, FailFast, RetryOnFailure


@dataclass
class RolloutArguments:
    """Episode budgets and the rollout error strategy. Mixed into a trainer config dataclass."""

    max_turns: int | None = field(default=16, metadata={"help": "Most actions per episode (None: no limit)."})
    max_tokens_per_trajectory: int | None = field(
        default=None, metadata={"help": "Most sampled tokens per episode (None: no limit)."})
    rollout_error_strategy: str = field(
        default="fail_fast", metadata={"help": "'fail_fast' (an env error stops training) or 'retry' (failed "
                                               "rollouts are replaced; a group out of retries is skipped)."})
    rollout_max_retries: int = field(default=2, metadata={"help": "Group-wide retry budget for 'retry'."})
    rollout_timeout: float | None = field(
        default=None, metadata={"help": "Seconds one rollout (and one make_envs / compute_group_rewards call) may "
                                        "take; past it 'fail_fast' stops with an error naming the env, 'retry' "
                                        "retries (None: no limit)."})
    max_context_tokens: int | None = field(
        default=None, metadata={"help": "Most tokens of context per episode (observation + action); None: the "
                                        "model's maximum positions."})
    context_overflow: str = field(
        default="end", metadata={"help": "An episode that outgrows max_context_tokens: 'end' (stop reason "
                                         "max_tokens) or 'error'."})
    sampler_max_wait_s: float | None = field(
        default=30.0, metadata={"help": "Longest wait for all live episodes to ask for a turn before sampling the "
                                        "requests already pending."})

    def check_rollout_arguments(self) -> None:
        """Raise a ``ValueError`` naming the config class and field for an invalid rollout setting."""
        if self.context_overflow not in ("end", "error"):
            raise ValueError(f"{type(self).__name__}.context_overflow must be 'end' or 'error', got "
                             f"{self.context_overflow!r}")
        if self.max_context_tokens is not None and self.max_context_tokens < 1:
            raise ValueError(f"{type(self).__name__}.max_context_tokens must be >= 1 or None, got "
                             f"{self.max_context_tokens}")
        if self.rollout_error_strategy not in ("fail_fast", "retry"):
            raise ValueError(f"{type(self).__name__}.rollout_error_strategy must be 'fail_fast' or 'retry', got "
                             f"{self.rollout_error_strategy!r}")

    def error_strategy(self) -> ErrorStrategy:
        if self.rollout_error_strategy == "retry":
            return RetryOnFailure(self.rollout_max_retries, self.rollout_timeout)
        return FailFast(self.rollout_timeout)

    def model_limits(self, model: Any = None) -> dict[str, Any]:
        """The ``RolloutBudget`` fields that come from the model: ``max_context_tokens`` (this config's, else the
        model's maximum positions), ``context_overflow`` and ``vocab_size`` (sampled ids must be below it)."""
        text_config = _text_config(model)
        max_positions = getattr(text_config, "max_position_embeddings", None)
        return {"max_context_tokens": self.max_context_tokens or max_positions,
                "context_overflow": self.context_overflow,
                "vocab_size": getattr(text_config, "vocab_size", None)}


def _text_config(model: Any) -> Any:
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return config
