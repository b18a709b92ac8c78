"""Configuration of :class:`~trl_envs.grpo_trainer.EnvGRPOTrainer`: TRL's ``GRPOConfig`` plus rollout settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from .rollouts import ErrorStrategy, FailFast, RetryOnFailure, RolloutBudget


@dataclass
class EnvGRPOConfig(GRPOConfig):
    """``GRPOConfig`` with the settings of env rollouts. Every GRPO option keeps its TRL meaning.

    ``num_generations`` is the group size: every env group must have exactly that many envs.
    ``max_completion_length`` is the default token budget of one turn; env tokens are not counted against it.
    """

    max_turns: int | None = field(default=16, metadata={"help": "Most actions per episode (None: no limit)."})
    max_tokens_per_turn: int | None = field(
        default=None, metadata={"help": "Most sampled tokens per action (default: max_completion_length)."})
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
    shuffle_dataset: bool | None = field(
        default=False, metadata={"help": "Shuffle env groups. Off by default: an RLDataset's batches are already "
                                         "sampled and often ordered on purpose (curricula, reproducible runs)."})

    def __post_init__(self):
        super().__post_init__()
        if self.rollout_error_strategy not in ("fail_fast", "retry"):
            raise ValueError(f"EnvGRPOConfig.rollout_error_strategy must be 'fail_fast' or 'retry', got "
                             f"{self.rollout_error_strategy!r}")

    def rollout_budget(self) -> RolloutBudget:
        return RolloutBudget(max_turns=self.max_turns,
                             max_tokens_per_turn=self.max_tokens_per_turn or self.max_completion_length,
                             max_tokens_per_trajectory=self.max_tokens_per_trajectory)

    def error_strategy(self) -> ErrorStrategy:
        if self.rollout_error_strategy == "retry":
            return RetryOnFailure(self.rollout_max_retries, self.rollout_timeout)
        return FailFast()
