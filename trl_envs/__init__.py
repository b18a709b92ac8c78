"""trl_envs: train language models with reinforcement learning on Tinker-style environments, with TRL.

The public API is what this module exports; see docs/DESIGN.md for how the pieces fit.
"""

from .batching import BatchingSampler
from .data_processing import (
    NonExtendingObservationError,
    TrainingRow,
    assemble_training_data,
    compute_advantages,
    remove_constant_reward_groups,
    trajectory_to_data,
)
from .evaluation import EvalResult, TagStats, evaluate, pass_at_k
from .gym_env import GymDataset, GymDatasetBuilder, GymEnv, GymGroupBuilder  # gymnasium is imported on first use
from .gym_evaluation import GymEvalResult, evaluate_gym, evaluate_policy
from .gym_text import ActionParseError, ActionParser, ObservationFormatter
from .message_env import MessageEnv, MessageStepResult, MessageTokenEnv
from .preference import PairStats, PreferencePair, make_preference_pairs
from .problem_env import ProblemEnv, ProblemGroupBuilder
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
from .renderer import Message, ParsedResponse, Renderer
from .rollouts import (
    FailFast,
    RetryOnFailure,
    RolloutBatchResult,
    RolloutBudget,
    do_group_rollout,
    do_single_rollout,
    run_rollout_batch,
    run_rollout_batch_async,
)
from .sampler import HFSampler, SampleRequest, Sampler
from .text_policy import TextPolicySampler
from .types import (
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

__version__ = "0.1.0"

# The trainers import TRL (seconds); load them on first use so env code and `python -m trl_envs.tiny_model` stay fast.
_LAZY = {
    "EnvGRPOConfig": ".grpo_config", "EnvGRPOTrainer": ".grpo_trainer", "EnvDPOConfig": ".dpo_config",
    "EnvDPOTrainer": ".dpo_trainer", "DataCollatorForMaskedPreference": ".dpo_trainer",
    "EmptyPairsWarning": ".dpo_trainer",
    "EnvRowDataset": ".env_datasets", "export_env_dataset": ".env_datasets", "load_env_dataset": ".env_datasets",
    "rows_to_dataset": ".env_datasets",
    "evaluate_model": ".model_eval", "push_folder_to_hub": ".hub", "plot_training_curves": ".plots",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trl_envs' has no attribute {name!r}")

__all__ = [
    "Action", "BatchingSampler", "EvalResult", "evaluate", "Env", "EnvContractError", "EnvGRPOConfig", "EnvGRPOTrainer", "EnvGroupBuilder", "FailFast", "HFSampler",
    "ListRLDataset", "Message", "MessageEnv", "MessageStepResult", "MessageTokenEnv", "NonExtendingObservationError",
    "Observation", "ParsedResponse", "ProblemEnv", "ProblemGroupBuilder", "RLDataset", "RLDatasetBuilder", "Renderer",
    "RetryOnFailure", "RolloutBatchResult", "RolloutBudget", "SampleRequest", "Sampler", "StepResult",
    "StopCondition", "TokensWithLogprobs", "Trajectory", "TrajectoryGroup", "Transition", "assemble_training_data",
    "compute_advantages", "do_group_rollout", "do_single_rollout", "remove_constant_reward_groups",
    "run_rollout_batch", "run_rollout_batch_async", "trajectory_to_data",
    "DataCollatorForMaskedPreference", "EmptyPairsWarning", "EnvDPOConfig", "EnvDPOTrainer", "PairStats",
    "PreferencePair", "make_preference_pairs",
    "EnvKind", "EnvRowDataset", "EnvRowError", "export_env_dataset", "get_env", "list_envs", "load_env_dataset",
    "make_env_dataset", "make_env_group_builder", "register_env", "rows_to_dataset", "UnknownEnvError",
    "TagStats", "pass_at_k", "evaluate_model", "push_folder_to_hub", "plot_training_curves",
    "ActionParseError", "ActionParser", "GymDataset", "GymDatasetBuilder", "GymEnv", "GymEvalResult", "GymGroupBuilder",
    "ObservationFormatter", "TextPolicySampler", "evaluate_gym", "evaluate_policy",
]

from .batching import parked  # noqa: E402
from .judge import ModelJudge, PairwiseJudgeGroupBuilder, pairwise_rewards  # noqa: E402
from .tools import CALCULATOR, Tool, ToolCall, parse_tool_calls, run_tool_call  # noqa: E402

__all__ += ["CALCULATOR", "ModelJudge", "PairwiseJudgeGroupBuilder", "Tool", "ToolCall", "pairwise_rewards", "parked",
            "parse_tool_calls", "run_tool_call"]
