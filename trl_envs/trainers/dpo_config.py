"""Configuration of :class:`~trl_envs.trainers.dpo.EnvDPOTrainer`: TRL's ``DPOConfig`` plus env rounds and rollouts."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import DPOConfig

from .activation_checkpointing import ActivationCheckpointing
from .checkpoints import ResumeArguments
from .machine_defaults import MachineDefaults
from .rollout_args import RolloutArguments, check_count


@dataclass
class EnvDPOConfig(RolloutArguments, ResumeArguments, ActivationCheckpointing, MachineDefaults, DPOConfig):
    """``DPOConfig`` with the settings of env-driven (iterative / online) DPO. Every DPO option keeps its TRL meaning.

    On a preference dataset (``train_dataset``) only the ``DPOConfig`` part matters. With envs (``env_dataset``),
    training runs ``num_rounds`` rounds of: sample ``batches_per_round`` batches of env groups with the current
    policy, pair the best and the worst trajectory of each group, train DPO on those pairs. In env mode
    ``num_train_epochs`` / ``max_steps`` and the learning-rate schedule apply **per round** (the schedule restarts
    each round; the optimizer state carries over).
    """

    num_rounds: int = field(default=4, metadata={"help": "Env mode: rounds of sampling then DPO training."})
    group_size: int = field(
        default=8,
        metadata={
            "help": "Env mode: trajectories per env group (best vs worst) for envs made from env rows or by name; an "
            "RLDataset's groups keep their own size."
        },
    )
    groups_per_round: int = field(
        default=16,
        metadata={
            "help": "Env mode: env groups per batch for envs made from env rows or by name (a round samples "
            "batches_per_round batches); an RLDataset's batches keep their own size."
        },
    )
    batches_per_round: int = field(
        default=1,
        metadata={
            "help": "Env mode: RLDataset batches (of env groups) sampled per round. Round r uses "
            "batches r*batches_per_round.. (wrapping around the dataset)."
        },
    )
    min_reward_gap: float = field(
        default=0.0,
        metadata={
            "help": "Env mode: a group gives a pair only if its best and worst total rewards differ "
            "by more than this (0: any strict difference; equal rewards are ties)."
        },
    )
    eval_envs_each_round: bool = field(
        default=True,
        metadata={
            "help": "Env mode: when there are evaluation envs, play them before the first round "
            "and after every round and log eval_env/... (the policy's env reward)."
        },
    )
    temperature: float = field(default=1.0, metadata={"help": "Env mode: sampling temperature (0: greedy)."})
    top_p: float = field(default=1.0, metadata={"help": "Env mode: nucleus sampling."})
    top_k: int | None = field(default=None, metadata={"help": "Env mode: top-k sampling (None: off)."})
    min_p: float | None = field(default=None, metadata={"help": "Env mode: min-p sampling (None: off)."})
    repetition_penalty: float = field(default=1.0, metadata={"help": "Env mode: repetition penalty (1.0: off)."})
    max_tokens_per_turn: int = field(default=64, metadata={"help": "Env mode: most sampled tokens per action."})
    ds3_gather_for_generation: bool = field(
        default=True,
        metadata={
            "help": "Env mode, DeepSpeed ZeRO-3: gather the policy's weights for generation "
            "(faster); False generates with sharded weights, for models that do not fit "
            "on one device (as GRPOConfig's option of the same name)."
        },
    )

    def __post_init__(self):
        from ..errors.preflight import check_sampling

        check_sampling(self.temperature, self.top_p)
        super().__post_init__()  # TRL's config, then RolloutArguments' checks
        check_count(self, "max_tokens_per_turn", minimum=1)
        check_count(self, "group_size", minimum=1)
        check_count(self, "groups_per_round", minimum=1)
        if self.num_rounds < 1:
            raise ValueError(f"EnvDPOConfig.num_rounds must be >= 1, got {self.num_rounds}")
        if self.batches_per_round < 1:
            raise ValueError(f"EnvDPOConfig.batches_per_round must be >= 1, got {self.batches_per_round}")
        if self.min_reward_gap < 0:
            raise ValueError(f"EnvDPOConfig.min_reward_gap must be >= 0, got {self.min_reward_gap}")
