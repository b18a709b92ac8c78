"""Rollout settings shared by the env trainers' configs (``EnvGRPOConfig``, ``EnvDPOConfig``)."""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field
from typing import Any

from ..rollout.engine import ErrorStrategy, FailFast, RetryOnFailure, RolloutBudget
from ..samplers.choice import SAMPLER_BACKENDS


@dataclass
class RolloutArguments:
    """Episode budgets and the rollout error strategy. Mixed into a trainer config dataclass, which also has a
    ``max_tokens_per_turn`` field (its default differs per trainer).

    Every field is checked when the config is built (:meth:`check_rollout_arguments`, called by the configs'
    ``__post_init__``), so a bad value fails before any model is loaded, with the config class, field and value named.
    """

    max_turns: int | None = field(default=16, metadata={"help": "Most actions per episode (None: no limit)."})
    max_tokens_per_trajectory: int | None = field(
        default=None, metadata={"help": "Most sampled tokens per episode (None: no limit)."}
    )
    rollout_error_strategy: str = field(
        default="fail_fast",
        metadata={
            "help": "'fail_fast' (an env error stops training) or 'retry' (failed "
            "rollouts are replaced; a group out of retries is skipped)."
        },
    )
    rollout_max_retries: int = field(default=2, metadata={"help": "Group-wide retry budget for 'retry'."})
    rollout_timeout: float | None = field(
        default=None,
        metadata={
            "help": "Seconds one rollout may take (None: no limit). With 'retry' a rollout that "
            "takes longer is replaced like a failed one; with 'fail_fast' it stops "
            "training with an error. Also bounds one make_envs / compute_group_rewards "
            "call."
        },
    )
    max_context_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Most tokens of context per episode (observation + action); None: the model's maximum positions."
        },
    )
    context_overflow: str = field(
        default="end",
        metadata={"help": "An episode that outgrows max_context_tokens: 'end' (stop reason max_tokens) or 'error'."},
    )
    sampler_max_wait_s: float | None = field(
        default=30.0,
        metadata={
            "help": "Longest wait for all live episodes to ask for a turn before sampling the "
            "requests already pending (episodes blocked on a sibling are not waited "
            "for: the requests go out once the event loop is quiet)."
        },
    )
    sampler_backend: str = field(
        default="generate",
        metadata={
            "help": "How the policy samples in this process: 'generate' (transformers' generate, one call per "
            "turn), 'static_cache' (a static KV cache: transformers compiles the decoding step on a GPU), "
            "'continuous_batching' (transformers' continuous batching: an episode's next turn starts as soon "
            "as it asks; also chosen by use_transformers_continuous_batching). Not with use_vllm or a custom "
            "sampler (docs/fast_sampling.md)."
        },
    )
    group_stall_timeout_s: float | None = field(
        default=600.0,
        metadata={
            "help": "Fail a group none of whose episodes asked for or got an action for this "
            "many seconds, naming it and what each env was doing (None: never)."
        },
    )

    def __post_init__(self):
        # Mixed in first (``class EnvGRPOConfig(RolloutArguments, GRPOConfig)``): TRL's config initialises, then ours
        # is checked. Listed first among the bases, our fields come last in the dataclass, so ``EnvGRPOConfig("out")``
        # still sets ``output_dir`` as ``GRPOConfig("out")`` does.
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        self.check_rollout_arguments()

    def check_rollout_arguments(self) -> None:
        """Raise a ``ValueError`` naming the config class, field and value for an invalid rollout setting; warn when
        ``rollout_timeout`` is given with ``fail_fast``."""
        if self.rollout_error_strategy not in ("fail_fast", "retry"):
            raise ValueError(
                f"{type(self).__name__}.rollout_error_strategy must be 'fail_fast' or 'retry', got "
                f"{self.rollout_error_strategy!r}"
            )
        check_count(self, "max_turns", minimum=1, optional=True)
        check_count(self, "max_tokens_per_trajectory", minimum=1, optional=True)
        check_count(self, "rollout_max_retries", minimum=0)
        check_seconds(self, "rollout_timeout")
        check_seconds(self, "sampler_max_wait_s")
        check_seconds(self, "group_stall_timeout_s")
        check_count(self, "max_context_tokens", minimum=1, optional=True)
        self.resolved_sampler_backend()
        if self.context_overflow not in ("end", "error"):
            raise ValueError(
                f"{type(self).__name__}.context_overflow must be 'end' or 'error', got {self.context_overflow!r}"
            )
        if self.rollout_timeout is not None and self.rollout_error_strategy == "fail_fast":
            warnings.warn(
                f"{type(self).__name__}: rollout_timeout={self.rollout_timeout} with rollout_error_strategy="
                f"'fail_fast': a rollout that runs longer than {self.rollout_timeout} s stops training with an error "
                "naming the env. Set rollout_error_strategy='retry' to replace such rollouts by fresh envs instead "
                f"(up to rollout_max_retries={self.rollout_max_retries} per group, then the group is skipped).",
                UserWarning,
                stacklevel=4,
            )

    def resolved_sampler_backend(self) -> str:
        """The in-process sampler the config asks for: ``sampler_backend``, or ``"continuous_batching"`` when TRL's
        ``use_transformers_continuous_batching`` is set. Raises a ``ValueError`` naming the fields for an unknown
        backend or one that contradicts ``use_vllm`` / ``use_transformers_continuous_batching``."""
        name = type(self).__name__
        backend = self.sampler_backend
        if backend not in SAMPLER_BACKENDS:
            raise ValueError(f"{name}.sampler_backend must be one of {list(SAMPLER_BACKENDS)}, got {backend!r}")
        if getattr(self, "use_transformers_continuous_batching", False):
            if backend not in ("generate", "continuous_batching"):
                raise ValueError(
                    f"{name}: use_transformers_continuous_batching=True asks for continuous batching but "
                    f"sampler_backend={backend!r}; set one of them only."
                )
            backend = "continuous_batching"
        if backend != "generate" and getattr(self, "use_vllm", False):
            raise ValueError(
                f"{name}: sampler_backend={backend!r} samples in this process; with use_vllm=True vLLM samples. "
                "Set one of them only."
            )
        return backend

    def continuous_batching_options(self) -> dict[str, Any]:
        """TRL's ``transformers_continuous_batching_config`` (fields of transformers' ``ContinuousBatchingConfig``)."""
        return dict(getattr(self, "transformers_continuous_batching_config", None) or {})

    def default_max_tokens_per_turn(self) -> int | None:
        """The per-turn token budget when ``max_tokens_per_turn`` is unset (``EnvGRPOConfig``:
        ``max_completion_length``)."""
        return None

    def rollout_budget(self, model=None) -> RolloutBudget:
        """The budget of one episode: ``max_turns``, ``max_tokens_per_turn`` (or :meth:`default_max_tokens_per_turn`),
        ``max_tokens_per_trajectory``; ``model`` (when given) sets the context budget and vocabulary
        (:meth:`model_limits`)."""
        return RolloutBudget(
            max_turns=self.max_turns,
            max_tokens_per_turn=self.max_tokens_per_turn or self.default_max_tokens_per_turn(),
            max_tokens_per_trajectory=self.max_tokens_per_trajectory,
            group_stall_timeout_s=self.group_stall_timeout_s,
            **self.model_limits(model),
        )

    def error_strategy(self) -> ErrorStrategy:
        if self.rollout_error_strategy == "retry":
            return RetryOnFailure(self.rollout_max_retries, self.rollout_timeout)
        return FailFast(self.rollout_timeout)

    def model_limits(self, model: Any = None) -> dict[str, Any]:
        """The ``RolloutBudget`` fields that come from the model: ``max_context_tokens`` (this config's, else the
        model's maximum positions), ``context_overflow`` and ``vocab_size`` (sampled ids must be below it)."""
        text_config = _text_config(model)
        max_positions = getattr(text_config, "max_position_embeddings", None)
        return {
            "max_context_tokens": self.max_context_tokens or max_positions,
            "context_overflow": self.context_overflow,
            "vocab_size": getattr(text_config, "vocab_size", None),
        }


def _text_config(model: Any) -> Any:
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    return config


def check_count(config, name: str, *, minimum: int, optional: bool = False) -> None:
    """``config.<name>`` must be an int >= ``minimum`` (or ``None`` when ``optional``)."""
    value = getattr(config, name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        none = " or None (no limit)" if optional else ""
        raise ValueError(f"{type(config).__name__}.{name} must be an integer >= {minimum}{none}, got {value!r}")


def check_seconds(config, name: str) -> None:
    """``config.<name>`` must be ``None`` (no limit) or a finite number of seconds > 0."""
    value = getattr(config, name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(
            f"{type(config).__name__}.{name} must be a number of seconds > 0, or None (no limit), got {value!r}"
        )
