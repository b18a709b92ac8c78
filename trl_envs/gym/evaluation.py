"""Evaluate a policy on a Gymnasium env the way Stable-Baselines3 does: mean and std of the episode return over
``n_eval_episodes`` episodes, with fixed seeds so that two policies (or two runs) meet the same start states.

The episodes are :class:`~trl_envs.gym.env.GymEnv` s played through :func:`trl_envs.rollout.evaluation.evaluate` (all at
once, one batched sampler call per turn). The episode return is the Gymnasium reward summed over the episode —
penalties for unparsable replies and ``reward_scale`` are trl_envs training signals and are left out, so the number
is comparable with ``stable_baselines3.common.evaluation.evaluate_policy`` on the same env.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.renderer import Renderer
from ..core.types import Trajectory
from ..rollout.engine import RolloutBudget
from ..rollout.evaluation import EvalResult, evaluate
from ..samplers.base import Sampler
from .env import GymDataset


@dataclass
class GymEvalResult:
    """What :func:`evaluate_gym` measured.

    Attributes:
        mean_reward, std_reward: of the episode returns (population std, as SB3).
        episode_rewards, episode_lengths: per episode, in seed order (seeds ``seed, seed + 1, ...``).
        env_steps: total Gymnasium steps played.
        parse_ok: share of replies that were legal actions.
        eval: the underlying :class:`~trl_envs.rollout.evaluation.EvalResult` (trl_envs rewards, metrics, trajectories).
    """

    mean_reward: float
    std_reward: float
    episode_rewards: list[float]
    episode_lengths: list[int]
    env_steps: int
    parse_ok: float
    eval: EvalResult = field(repr=False)


def _episode_return(trajectory: Trajectory) -> tuple[float, int]:
    stepped = [t.logs["env_reward"] for t in trajectory.transitions if "env_reward" in t.logs]
    return float(sum(stepped)), len(stepped)


def evaluate_gym(
    sampler: Sampler,
    env: Any,
    renderer: Renderer,
    n_eval_episodes: int = 10,
    *,
    seed: int = 0,
    max_tokens_per_turn: int = 16,
    max_turns: int | None = None,
    **env_kwargs: Any,
) -> GymEvalResult:
    """Play ``n_eval_episodes`` episodes of ``env`` (a Gymnasium id or factory) with ``sampler``, episode ``i``
    reset with seed ``seed + i``.

    Args:
        sampler: the policy; e.g. ``HFSampler(model, tokenizer, temperature=0)`` (deterministic, like SB3's
            ``deterministic=True``) or a :class:`~trl_envs.samplers.text_policy.TextPolicySampler`.
        max_tokens_per_turn: sampling budget of one reply.
        max_turns: rollout cap on replies per episode (default: none; the env's time limit ends episodes).
        **env_kwargs: :class:`~trl_envs.gym.env.GymEnv` options (``mode``, ``formatter``, ``max_episode_steps``...).
    """
    if n_eval_episodes < 1:
        raise ValueError(f"evaluate_gym: n_eval_episodes must be >= 1, got {n_eval_episodes}")
    dataset = GymDataset(
        env, renderer, batch_size=n_eval_episodes, group_size=1, num_batches=1, seed=seed, **env_kwargs
    )
    result = evaluate(
        sampler, dataset, budget=RolloutBudget(max_turns=max_turns, max_tokens_per_turn=max_tokens_per_turn)
    )
    trajectories = [g.trajectories[0] for g in result.groups if g is not None]
    returns, lengths = zip(*(_episode_return(t) for t in trajectories))
    replies = [t.metrics["parse_ok"] for tr in trajectories for t in tr.transitions if "parse_ok" in t.metrics]
    return GymEvalResult(
        float(np.mean(returns)),
        float(np.std(returns)),
        list(returns),
        list(lengths),
        int(sum(lengths)),
        float(np.mean(replies)) if replies else 0.0,
        result,
    )


def evaluate_policy(
    sampler: Sampler,
    env: Any,
    renderer: Renderer,
    n_eval_episodes: int = 10,
    *,
    seed: int = 0,
    return_episode_rewards: bool = False,
    **kwargs: Any,
) -> tuple[float, float] | tuple[list[float], list[int]]:
    """Stable-Baselines3's ``evaluate_policy`` shape: ``(mean_reward, std_reward)``, or ``(episode_rewards,
    episode_lengths)`` with ``return_episode_rewards=True``. ``kwargs`` go to :func:`evaluate_gym`."""
    result = evaluate_gym(sampler, env, renderer, n_eval_episodes, seed=seed, **kwargs)
    if return_episode_rewards:
        return result.episode_rewards, result.episode_lengths
    return result.mean_reward, result.std_reward
