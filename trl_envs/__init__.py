"""trl_envs: train language models with reinforcement learning on Tinker-style environments, with TRL.

The public API is what this module exports; see docs/DESIGN.md for how the pieces fit.
"""

from .rollout.batching import BatchingSampler
from .training_data.rows import (
    NonExtendingObservationError,
    TrainingRow,
    assemble_training_data,
    compute_advantages,
    remove_constant_reward_groups,
    trajectory_to_data,
)
from .rollout.evaluation import EvalResult, TagStats, evaluate, pass_at_k
from .gym.env import GymDataset, GymDatasetBuilder, GymEnv, GymGroupBuilder  # gymnasium is imported on first use
from .gym.evaluation import GymEvalResult, evaluate_gym, evaluate_policy
from .gym.text import ActionParseError, ActionParser, ObservationFormatter
from .core.message_env import MessageEnv, MessageStepResult, MessageTokenEnv
from .training_data.preference import PairStats, PreferencePair, make_preference_pairs
from .core.problem_env import ProblemEnv, ProblemGroupBuilder
from .registry.names import (
    EnvKind,
    EnvRowError,
    UnknownEnvError,
    get_env,
    list_envs,
    make_env_dataset,
    make_env_group_builder,
    register_env,
)
from .core.renderer import Message, ParsedResponse, Renderer
from .rollout.engine import (
    FailFast,
    RetryOnFailure,
    RolloutBatchResult,
    RolloutBudget,
    do_group_rollout,
    do_single_rollout,
    run_rollout_batch,
    run_rollout_batch_async,
)
from .rollout.validation import ContextBudgetError
from .rollout.watchdog import RolloutTimeoutError
from .samplers.hf import HFSampler, SampleRequest, Sampler
from .samplers.text_policy import TextPolicySampler
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

__version__ = "0.1.0"

# The trainers import TRL (seconds); load them on first use so env code and `python -m trl_envs.tiny_model` stay fast.
_LAZY = {
    "EnvGRPOConfig": ".trainers.grpo_config", "EnvGRPOTrainer": ".trainers.grpo", "EnvDPOConfig": ".trainers.dpo_config",
    "EnvDPOTrainer": ".trainers.dpo", "DataCollatorForMaskedPreference": ".trainers.dpo",
    "EmptyPairsWarning": ".trainers.dpo",
    "EnvRowDataset": ".registry.env_datasets", "export_env_dataset": ".registry.env_datasets", "load_env_dataset": ".registry.env_datasets",
    "rows_to_dataset": ".registry.env_datasets",
    "evaluate_model": ".hub.model_eval", "push_folder_to_hub": ".hub.push", "plot_training_curves": ".hub.plots",
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
    "RetryOnFailure", "RolloutBatchResult", "RolloutBudget", "RolloutTimeoutError", "ContextBudgetError", "SampleRequest", "Sampler", "StepResult",
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

from .rollout.batching import parked  # noqa: E402
from .core.judge import ModelJudge, PairwiseJudgeGroupBuilder, pairwise_rewards  # noqa: E402
from .core.tools import CALCULATOR, Tool, ToolCall, parse_tool_calls, run_tool_call  # noqa: E402

__all__ += ["CALCULATOR", "ModelJudge", "PairwiseJudgeGroupBuilder", "Tool", "ToolCall", "pairwise_rewards", "parked",
            "parse_tool_calls", "run_tool_call"]
