"""Configuration of :class:`~trl_envs.grpo_trainer.EnvGRPOTrainer`: TRL's ``GRPOConfig`` plus rollout settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from .rollout_args import RolloutArguments
from .rollouts import RolloutBudget


@dataclass
class EnvGRPOConfig(GRPOConfig, RolloutArguments):
    """``GRPOConfig`` with the settings of env rollouts. Every GRPO option keeps its TRL meaning.

    ``num_generations`` is the group size: every env group must have exactly that many envs.
    ``max_completion_length`` is the default token budget of one turn; env tokens are not counted against it.
    """

    max_tokens_per_turn: int | None = field(
        default=None, metadata={"help": "Most sampled tokens per action (default: max_completion_length)."})
    shuffle_dataset: bool | None = field(
        default=False, metadata={"help": "Shuffle env groups. Off by default: an RLDataset's batches are already "
                                         "sampled and often ordered on purpose (curricula, reproducible runs)."})

    def __post_init__(self):
        super().__post_init__()
        self.check_rollout_arguments()

    def rollout_budget(self) -> RolloutBudget:
        return RolloutBudget(max_turns=self.max_turns,
                             max_tokens_per_turn=self.max_tokens_per_turn or self.max_completion_length,
                             max_tokens_per_trajectory=self.max_tokens_per_trajectory)
