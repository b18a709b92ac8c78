"""Configuration of :class:`~trl_envs.trainers.grpo.EnvGRPOTrainer`: TRL's ``GRPOConfig`` plus rollout settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from .activation_checkpointing import ActivationCheckpointing
from .checkpoints import ResumeArguments
from .machine_defaults import MachineDefaults
from .rollout_args import RolloutArguments, check_count

ASYNC_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask", "none")


@dataclass
class EnvGRPOConfig(RolloutArguments, ResumeArguments, ActivationCheckpointing, MachineDefaults, GRPOConfig):
    """``GRPOConfig`` with the settings of env rollouts. Every GRPO option keeps its TRL meaning.

    ``num_generations`` is the group size: every env group must have exactly that many envs.
    ``max_completion_length`` is the default token budget of one turn; env tokens are not counted against it.
    """

    max_tokens_per_turn: int | None = field(
        default=None, metadata={"help": "Most sampled tokens per action (default: max_completion_length)."}
    )
    training_rows: str = field(
        default="auto",
        metadata={
            "help": "'auto': one training row per episode when its observations extend each other "
            "token-exactly, else one row per turn; 'trajectory': always one row per "
            "episode (a non-extending observation is an error); 'turn': one row per turn."
        },
    )
    reward_completions: str = field(
        default="text",
        metadata={
            "help": "What reward_funcs get as `completions`: 'text' (the episode's model turns, decoded, joined by "
            "newlines) or 'messages' (one assistant message per model turn)."
        },
    )
    credit_assignment: str = field(
        default="trajectory",
        metadata={
            "help": "'trajectory': every action token gets the episode's advantage (GRPO). "
            "'per_turn': each turn's tokens get the reward-to-go from that turn, "
            "baselined across the group (see docs/credit_assignment.md)."
        },
    )
    credit_gamma: float = field(
        default=1.0,
        metadata={"help": "Discount of later step rewards in the per-turn reward-to-go (1.0: undiscounted)."},
    )
    rollout_traces: int = field(
        default=4,
        metadata={
            "help": "Episodes per env tag written to output_dir/rollouts/ (JSONL) and logged as a "
            "table to the report_to trackers every logging_steps (`trl-envs show "
            "OUTPUT_DIR` renders them); 0: none."
        },
    )
    max_staleness: int = field(
        default=0,
        metadata={
            "help": "0: roll out each batch when the trainer needs it. k >= 1: a background thread "
            "rolls out the next batches while the trainer trains, sampling from a copy of the "
            "policy at most k optimizer steps older than the policy that trains on them "
            "(docs/async.md)."
        },
    )
    weight_sync_steps: int = field(
        default=1,
        metadata={
            "help": "With max_staleness >= 1: copy the policy's trainable weights to the sampler "
            "every this many optimizer steps."
        },
    )
    async_importance_sampling: str = field(
        default="token_truncate",
        metadata={
            "help": "With max_staleness >= 1: the importance-sampling correction of "
            "sampler vs trained policy, one of TRL's vllm_importance_sampling_"
            "mode values ('token_truncate', 'token_mask', 'sequence_truncate', "
            "'sequence_mask') with its vllm_importance_sampling_clip_max/min "
            "bounds, or 'none'."
        },
    )
    shuffle_dataset: bool | None = field(
        default=False,
        metadata={
            "help": "Shuffle env groups. Off by default: an RLDataset's batches are already "
            "sampled and often ordered on purpose (curricula, reproducible runs)."
        },
    )

    health_patience: int | None = field(
        default=10,
        metadata={
            "help": "Training-health watchdog: stop (an error, no model card) after this many "
            "logged steps in a row that cannot teach anything -- no group with mixed "
            "rewards, every group skipped, a zero gradient or collapsed entropy; each such "
            "step warns. None: warn only."
        },
    )
    health_min_entropy: float = field(
        default=1e-4,
        metadata={"help": "Training-health watchdog: a mean token entropy below this counts as a collapsed policy."},
    )

    def __post_init__(self):
        from ..errors.preflight import check_group_geometry, check_sampling

        check_sampling(self.temperature, self.top_p)
        explicit = self.generation_batch_size is not None or self.steps_per_generation is not None
        try:
            super().__post_init__()  # TRL's config, then RolloutArguments' checks
        except ValueError as e:  # TRL names generation_batch_size, a flag the user did not pass: name theirs
            if explicit or "generation_batch_size" not in str(e):
                raise
            check_group_geometry(
                self.num_generations,
                self.per_device_train_batch_size,
                self.gradient_accumulation_steps,
                self.world_size,
            )
            raise
        check_count(self, "health_patience", minimum=1, optional=True)
        check_count(self, "max_tokens_per_turn", minimum=1, optional=True)
        check_count(self, "rollout_traces", minimum=0)
        if self.training_rows not in ("auto", "trajectory", "turn"):
            raise ValueError(
                f"EnvGRPOConfig.training_rows must be 'auto', 'trajectory' or 'turn', got {self.training_rows!r}"
            )
        if self.reward_completions not in ("text", "messages"):
            raise ValueError(
                f"EnvGRPOConfig.reward_completions must be 'text' or 'messages', got {self.reward_completions!r}"
            )
        if self.credit_assignment not in ("trajectory", "per_turn"):
            raise ValueError(
                f"EnvGRPOConfig.credit_assignment must be 'trajectory' or 'per_turn', got {self.credit_assignment!r}"
            )
        if not 0.0 <= self.credit_gamma <= 1.0:
            raise ValueError(f"EnvGRPOConfig.credit_gamma must be in [0, 1], got {self.credit_gamma}")
        check_count(self, "max_staleness", minimum=0)
        check_count(self, "weight_sync_steps", minimum=1)
        if self.async_importance_sampling not in ASYNC_IS_MODES:
            raise ValueError(
                f"EnvGRPOConfig.async_importance_sampling must be one of {list(ASYNC_IS_MODES)}, got "
                f"{self.async_importance_sampling!r}"
            )
        if self.max_staleness and self.use_vllm:
            raise ValueError(
                "EnvGRPOConfig.max_staleness >= 1 samples with a copy of the policy through transformers' "
                "generate; with use_vllm=True set max_staleness=0 (docs/async.md, 'GPU notes')."
            )

    def default_max_tokens_per_turn(self) -> int | None:
        return self.max_completion_length
