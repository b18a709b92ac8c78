"""Rollout settings shared by the env trainers' configs (``EnvGRPOConfig``, ``EnvDPOConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..rollout.engine import ErrorStrategy, FailFast, RetryOnFailure, RolloutBudget


@dataclass
class RolloutArguments:
    """Episode budgets and the rollout error strategy. Mixed into a trainer config dataclass, which also has a
    ``max_tokens_per_turn`` field (its default differs per trainer)."""

    max_turns: int | None = field(default=16, metadata={"help": "Most actions per episode (None: no limit)."})
    max_tokens_per_trajectory: int | None = field(
        default=None, metadata={"help": "Most sampled tokens per episode (None: no limit)."})
    rollout_error_strategy: str = field(
        default="fail_fast", metadata={"help": "'fail_fast' (an env error stops training) or 'retry' (failed "
                                               "rollouts are replaced; a group out of retries is skipped)."})
    rollout_max_retries: int = field(default=2, metadata={"help": "Group-wide retry budget for 'retry'."})
    rollout_timeout: float | None = field(
        default=None, metadata={"help": "Seconds one rollout may take with 'retry' (None: no limit)."})
    sampler_max_wait_s: float | None = field(
        default=30.0, metadata={"help": "Longest wait for all live episodes to ask for a turn before sampling the "
                                        "requests already pending."})

    def check_rollout_arguments(self) -> None:
        """Raise a ``ValueError`` naming the config class and field for an invalid rollout setting."""
        if self.rollout_error_strategy not in ("fail_fast", "retry"):
            raise ValueError(f"{type(self).__name__}.rollout_error_strategy must be 'fail_fast' or 'retry', got "
                             f"{self.rollout_error_strategy!r}")

    def default_max_tokens_per_turn(self) -> int | None:
        """The per-turn token budget when ``max_tokens_per_turn`` is unset (``EnvGRPOConfig``: ``max_completion_length``)."""
        return None

    def rollout_budget(self) -> RolloutBudget:
        """The budget of one episode: ``max_turns``, ``max_tokens_per_turn`` (or :meth:`default_max_tokens_per_turn`),
        ``max_tokens_per_trajectory``."""
        return RolloutBudget(max_turns=self.max_turns,
                             max_tokens_per_turn=self.max_tokens_per_turn or self.default_max_tokens_per_turn(),
                             max_tokens_per_trajectory=self.max_tokens_per_trajectory)

    def error_strategy(self) -> ErrorStrategy:
        if self.rollout_error_strategy == "retry":
            return RetryOnFailure(self.rollout_max_retries, self.rollout_timeout)
        return FailFast()
