"""Evaluate a saved model or adapter on a named env's test split: what ``trl-envs eval`` and the model cards run."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..core.renderer import Renderer
from ..core.types import RLDatasetBuilder
from ..registry.names import make_env_dataset
from ..rollout.engine import RolloutBudget
from ..rollout.evaluation import EvalResult, evaluate
from ..rollout.event_loop import run_sync
from ..samplers.hf import HFSampler
from ..trainers.rollout_args import RolloutArguments

DEFAULT_BATCH_SIZE = 8
"""Problems per dataset batch offered to the env when a number of problems is asked for."""


class NoTestSplitError(ValueError):
    """The env to evaluate on has no test split (its dataset builder returns ``(train, None)``)."""


def evaluate_model(
    model_name_or_path: str,
    env: str,
    *,
    env_kwargs: dict[str, Any] | None = None,
    split: str = "test",
    num_problems: int | None = None,
    samples_per_problem: int = 4,
    ks: Sequence[int] | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_tokens: int = 32,
    max_turns: int | None = 16,
    max_tokens_per_trajectory: int | None = None,
    seed: int = 0,
    success_threshold: float = 0.0,
    device: str | None = None,
    dtype: str | None = None,
    chunk_size: int | None = 32,
    progress: bool = False,
    model=None,
    tokenizer=None,
    max_context_tokens: int | None = None,
    at_most: bool = False,
) -> EvalResult:
    """Load ``model_name_or_path`` (full model or PEFT adapter, see :func:`~trl_envs.hub.model_loading.load_policy`),
    play ``num_problems`` problems of ``env``'s ``split`` with ``samples_per_problem`` samples each and return the
    :class:`~trl_envs.rollout.evaluation.EvalResult` (mean/std reward, pass@k, per tag).

    The env dataset is made by :func:`~trl_envs.registry.names.make_env_dataset` with ``env_kwargs`` and, where the
    env accepts them, ``group_size=samples_per_problem`` and enough batches (``batch_size``, ``num_test_batches`` or
    ``num_batches``) for ``num_problems`` (default: the whole split as the env makes it). The problems are the env's
    own (its dataset seed is an ``env_kwargs`` option); ``seed`` seeds the sampling; ``temperature=0`` is greedy.
    Pass ``model`` and ``tokenizer`` to evaluate a model already in memory (``model_name_or_path`` is then only a
    label). Episodes end at ``max_context_tokens`` tokens of context (default: the model's maximum positions), as in
    training. With ``at_most``, ``num_problems`` is an upper bound: a smaller split is played whole, each problem
    once.

    Raises:
        UnknownEnvError: (a ``KeyError``) for an unknown env. ValueError: for an unknown or missing split, or a split
        with fewer problems than asked for.
    """
    if split not in ("train", "test"):
        raise ValueError(f"evaluate_model: split must be 'train' or 'test', got {split!r}")
    from ..errors.preflight import check_counts, check_pass_k, check_sampling

    check_sampling(temperature, top_p)
    check_counts(
        num_problems=num_problems,
        samples_per_problem=samples_per_problem,
        max_tokens=max_tokens,
        max_turns=max_turns,
        max_tokens_per_trajectory=max_tokens_per_trajectory,
        chunk_size=chunk_size,
    )
    check_pass_k(ks, samples_per_problem)
    if model is None:
        from .model_loading import load_policy

        model, tokenizer = load_policy(model_name_or_path, device=device, dtype=dtype)
    elif tokenizer is None:
        raise ValueError("evaluate_model: pass the tokenizer with the model")
    renderer = Renderer(tokenizer)
    offered: dict[str, Any] = {"group_size": samples_per_problem}
    if num_problems is not None:
        batch_size = min(num_problems, DEFAULT_BATCH_SIZE)
        batches = math.ceil(num_problems / batch_size)
        offered |= {"batch_size": batch_size, "num_test_batches" if split == "test" else "num_batches": batches}
    envs = make_env_dataset(env, renderer, defaults=offered, **(env_kwargs or {}))
    train, test = run_sync(envs) if isinstance(envs, RLDatasetBuilder) else (envs, None)
    dataset = train if split == "train" else test
    if dataset is None:
        raise NoTestSplitError(f"evaluate_model: env {env!r} has no test split; use split='train'")
    sampler = HFSampler(model, tokenizer, temperature=temperature, top_p=top_p)
    limits = RolloutArguments(max_context_tokens=max_context_tokens).model_limits(model)  # as in training
    budget = RolloutBudget(
        max_turns=max_turns,
        max_tokens_per_turn=max_tokens,
        max_tokens_per_trajectory=max_tokens_per_trajectory,
        **limits,
    )
    return evaluate(
        sampler,
        dataset,
        budget=budget,
        num_problems=num_problems,
        ks=ks,
        seed=seed,
        success_threshold=success_threshold,
        chunk_size=chunk_size,
        progress=progress,
        at_most=at_most,
    )
