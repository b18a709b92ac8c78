"""trl_envs: train language models with reinforcement learning on Tinker-style environments, with TRL.

The public API is what this module exports, grouped below by package (docs/DESIGN.md has the package table). The
trainers and the dataset / Hub helpers import TRL or ``datasets`` (seconds), so they load on first use.
"""

# core/: the env contract a user subclasses
from .core.judge import PairwiseJudgeGroupBuilder, pairwise_rewards
from .core.message_env import MessageEnv, MessageStepResult, MessageTokenEnv
from .core.problem_env import ProblemEnv, ProblemGroupBuilder
from .core.renderer import Message, ParsedResponse, Renderer
from .core.tools import CALCULATOR, Tool, ToolCall, parse_tool_calls, run_tool_call
from .core.types import (
    Action,
    Env,
    EnvContractError,
    EnvGroupBuilder,
    ListRLDataset,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
    StopCondition,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)

# gym/: Gymnasium envs (gymnasium itself is imported on first use)
from .gym.env import GymDataset, GymDatasetBuilder, GymEnv, GymGroupBuilder
from .gym.evaluation import GymEvalResult, evaluate_gym, evaluate_policy
from .gym.text import ActionParseError, ActionParser, ObservationFormatter

# registry/: envs by name and as rows
from .registry import (
    EnvKind,
    EnvRowError,
    UnknownEnvError,
    get_env,
    list_envs,
    make_env_dataset,
    make_env_group_builder,
    register_env,
)

# rollout/: episodes
from .rollout.batching import BatchingPolicy, parked
from .rollout.engine import (
    FailFast,
    RetryOnFailure,
    RolloutBatchResult,
    RolloutBudget,
    SkipGroupError,
    do_group_rollout,
    do_single_rollout,
    run_rollout_batch,
    run_rollout_batch_async,
)
from .rollout.evaluation import EvalResult, TagStats, evaluate, pass_at_k
from .rollout.model_judge import ModelJudge
from .rollout.validation import ContextBudgetError
from .rollout.watchdog import RolloutTimeoutError

# samplers/: prompts -> sampled actions
from .samplers.base import Sampler, SampleRequest
from .samplers.hf import HFSampler
from .samplers.text_policy import TextPolicySampler

# training_data/: trajectories -> what is trained
from .training_data.pairs_step import PairsStep, rollout_pairs
from .training_data.preference import PairStats, PreferencePair, make_preference_pairs
from .training_data.rows import (
    NonExtendingObservationError,
    TrainingRow,
    assemble_training_data,
    compute_advantages,
    remove_constant_reward_groups,
    trajectory_to_data,
)
from .training_data.rows_step import RowsStep, rollout_rows

__version__ = "0.1.0"

# Loaded on first use: name -> module (trainers/ imports TRL; registry.env_datasets and hub/ import datasets / the Hub).
_LAZY = {
    # trainers/
    "EnvGRPOConfig": ".trainers.grpo_config",
    "EnvGRPOTrainer": ".trainers.grpo",
    "EnvDPOConfig": ".trainers.dpo_config",
    "EnvDPOTrainer": ".trainers.dpo",
    "DataCollatorForMaskedPreference": ".trainers.dpo",
    "EmptyPairsWarning": ".trainers.dpo",
    # registry/env_datasets.py
    "EnvRowDataset": ".registry.env_datasets",
    "export_env_dataset": ".registry.env_datasets",
    "load_env_dataset": ".registry.env_datasets",
    "rows_to_dataset": ".registry.env_datasets",
    # hub/
    "evaluate_model": ".hub.model_eval",
    "push_folder_to_hub": ".hub.push",
    "plot_training_curves": ".hub.plots",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trl_envs' has no attribute {name!r}")


__all__ = [
    # core/
    "Action",
    "CALCULATOR",
    "Env",
    "EnvContractError",
    "EnvGroupBuilder",
    "ListRLDataset",
    "Message",
    "MessageEnv",
    "MessageStepResult",
    "MessageTokenEnv",
    "ModelJudge",
    "Observation",
    "PairwiseJudgeGroupBuilder",
    "ParsedResponse",
    "ProblemEnv",
    "ProblemGroupBuilder",
    "RLDataset",
    "RLDatasetBuilder",
    "Renderer",
    "StepResult",
    "StopCondition",
    "TokensWithLogprobs",
    "Tool",
    "ToolCall",
    "Trajectory",
    "TrajectoryGroup",
    "Transition",
    "pairwise_rewards",
    "parse_tool_calls",
    "run_tool_call",
    # samplers/
    "HFSampler",
    "SampleRequest",
    "Sampler",
    "TextPolicySampler",
    # rollout/
    "BatchingPolicy",
    "ContextBudgetError",
    "EvalResult",
    "FailFast",
    "RetryOnFailure",
    "RolloutBatchResult",
    "RolloutBudget",
    "RolloutTimeoutError",
    "SkipGroupError",
    "TagStats",
    "do_group_rollout",
    "do_single_rollout",
    "evaluate",
    "parked",
    "pass_at_k",
    "run_rollout_batch",
    "run_rollout_batch_async",
    # training_data/
    "NonExtendingObservationError",
    "PairStats",
    "PairsStep",
    "PreferencePair",
    "RowsStep",
    "TrainingRow",
    "assemble_training_data",
    "compute_advantages",
    "make_preference_pairs",
    "remove_constant_reward_groups",
    "rollout_rows",
    "rollout_pairs",
    "trajectory_to_data",
    # trainers/ (lazy)
    "DataCollatorForMaskedPreference",
    "EmptyPairsWarning",
    "EnvDPOConfig",
    "EnvDPOTrainer",
    "EnvGRPOConfig",
    "EnvGRPOTrainer",
    # registry/
    "EnvKind",
    "EnvRowDataset",
    "EnvRowError",
    "UnknownEnvError",
    "export_env_dataset",
    "get_env",
    "list_envs",
    "load_env_dataset",
    "make_env_dataset",
    "make_env_group_builder",
    "register_env",
    "rows_to_dataset",
    # gym/
    "ActionParseError",
    "ActionParser",
    "GymDataset",
    "GymDatasetBuilder",
    "GymEnv",
    "GymEvalResult",
    "GymGroupBuilder",
    "ObservationFormatter",
    "evaluate_gym",
    "evaluate_policy",
    # hub/ (lazy)
    "evaluate_model",
    "plot_training_curves",
    "push_folder_to_hub",
]
