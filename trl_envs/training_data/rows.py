"""From trajectory groups to training rows: advantages, masks and logprobs.

One trajectory becomes one row: ``prompt`` = its first observation; ``completion`` = every action plus the env
tokens between actions (each next observation minus the context before it); ``mask`` = 1 exactly on sampled
tokens; ``logprobs`` aligned with the completion (0 on env tokens). This only works when each observation
extends the previous context token-exactly (checked on each turn's new tokens, so in time linear in the episode:
see ``_extends``); otherwise :class:`NonExtendingObservationError` names the env and
the turn. Trajectories whose observations do not extend each other train as one row per turn instead
(:func:`trajectory_to_turn_rows`): prompt = that turn's observation, completion = that turn's action.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from ..core.types import Trajectory, TrajectoryGroup

Scaling = Literal["group", "batch", "none"]

# Normalisation each loss expects by default. TRL's GRPO family scales by the group std (its `scale_rewards`
# default); Dr. GRPO argues for plain centring; the Tinker cookbook's importance_sampling / ppo losses centre only.
_LOSS_SCALING: dict[str, Scaling] = {
    "grpo": "group",
    "bnpo": "group",
    "dapo": "group",
    "cispo": "group",
    "sapo": "group",
    "vespo": "group",
    "luspo": "group",
    "dr_grpo": "none",
    "importance_sampling": "none",
    "ppo": "none",
}
STD_EPS = 1e-4  # as TRL: (r - mean) / (std + 1e-4)


class NonExtendingObservationError(ValueError):
    """An observation does not start with the previous observation plus the action, so the trajectory cannot be
    one training sequence without re-tokenization drift."""


def compute_advantages(
    trajectory_groups: Sequence[TrajectoryGroup], loss_fn: str = "grpo", scale: Scaling | None = None
) -> list[torch.Tensor]:
    """Per group, one advantage per trajectory: total reward minus the group mean, then scaled.

    ``scale`` (default: what ``loss_fn`` expects) is ``"group"`` (divide by the group's Bessel-corrected std +
    1e-4, exactly as TRL), ``"batch"`` (by the std over all trajectories of all groups) or ``"none"``. A group of
    one trajectory gets advantage 0.
    """
    if scale is None:
        if loss_fn not in _LOSS_SCALING:
            raise ValueError(
                f"compute_advantages: unknown loss_fn {loss_fn!r}; known: {sorted(_LOSS_SCALING)} "
                "(or pass scale= explicitly)"
            )
        scale = _LOSS_SCALING[loss_fn]
    rewards = [torch.tensor(g.get_total_rewards(), dtype=torch.float64) for g in trajectory_groups]
    batch_std = torch.cat(rewards).std() if scale == "batch" and sum(len(r) for r in rewards) > 1 else None
    out = []
    for r in rewards:
        if len(r) < 2:
            out.append(torch.zeros_like(r))
            continue
        out.append((r - r.mean()) / advantage_scale(r, scale, batch_std))
    return out


def advantage_scale(group_values: torch.Tensor, scale: Scaling, batch_std: float | torch.Tensor | None = None) -> float:
    """What centred rewards are divided by: ``"group"`` -> the group's Bessel-corrected std + 1e-4 (TRL's formula),
    ``"batch"`` -> ``batch_std`` + 1e-4, ``"none"`` -> 1."""
    if scale == "group":
        return float(group_values.std()) + STD_EPS
    if scale == "batch":
        if batch_std is None:
            raise ValueError("advantage_scale: scale='batch' needs the batch std")
        return float(batch_std) + STD_EPS
    if scale == "none":
        return 1.0
    raise ValueError(f"advantage scale must be 'group', 'batch' or 'none', got {scale!r}")


def remove_constant_reward_groups(trajectory_groups: Sequence[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """Drop groups whose trajectories all have the same total reward (they carry no GRPO signal)."""
    return [g for g in trajectory_groups if len(set(g.get_total_rewards())) > 1]


@dataclass
class TrainingRow:
    """One training sequence.

    Attributes:
        prompt_ids: the first observation.
        completion_ids: actions and the env tokens between them.
        mask: 1 on sampled (trained) tokens, 0 on env tokens; same length as ``completion_ids``.
        logprobs: sampling logprob per completion token (0.0 on env tokens).
        advantage: the trajectory's advantage (0.0 until assigned).
        reward: the trajectory's total reward.
        action_spans: ``(start, end)`` of each turn's action in ``completion_ids``, in turn order.
        first_turn: the turn index of the first span (0 for a whole trajectory, ``t`` for the row of turn ``t``).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    mask: list[int]
    logprobs: list[float]
    advantage: float = 0.0
    reward: float = 0.0
    action_spans: list[tuple[int, int]] = field(default_factory=list)
    first_turn: int = 0


def trajectory_to_data(trajectory: Trajectory, env_name: str = "env") -> TrainingRow:
    """Turn one trajectory into one :class:`TrainingRow` (see the module docstring).

    Raises :class:`NonExtendingObservationError` naming ``env_name`` and the turn when an observation does not
    extend the previous context.
    """
    if not trajectory.transitions:
        raise ValueError(f"{env_name}: trajectory has no transitions")
    prompt = list(trajectory.transitions[0].ob)
    completion: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    spans: list[tuple[int, int]] = []
    previous = None
    for turn, tr in enumerate(trajectory.transitions):
        if turn > 0:
            ob = tr.ob
            context_len = len(prompt) + len(completion)
            if not _extends(ob, prompt, previous, context_len):
                raise NonExtendingObservationError(_drift_message(env_name, turn, prompt + completion, ob))
            env_tokens = ob[context_len:]
            completion += env_tokens
            mask += [0] * len(env_tokens)
            logprobs += [0.0] * len(env_tokens)
        action = tr.ac.tokens
        spans.append((len(completion), len(completion) + len(action)))
        completion += action
        mask += [1] * len(action)
        logprobs += _action_logprobs(tr, turn, env_name)
        previous = tr
    if not completion:
        raise ValueError(f"{env_name}: trajectory sampled no tokens; a completion cannot be empty")
    return TrainingRow(prompt, completion, mask, logprobs, action_spans=spans)


HEAD_CHECK_TOKENS = 64
"""How many leading tokens of each observation are compared with the first observation's (see :func:`_extends`)."""


def _extends(ob: list[int], prompt: list[int], previous, context_len: int) -> bool:
    """Whether ``ob`` extends the context (first observation + completion so far), checked in time linear in the
    NEW tokens, not in the whole context: the previous action must appear right after the previous observation
    (``ob[len(previous.ob):context_len] == previous action``: where re-tokenization drift shows, at the boundary
    of the last action and the new turn), and the first :data:`HEAD_CHECK_TOKENS` tokens must be the prompt's
    (a template that rewrites the system prompt per turn). The rest of the history is taken to be the previous
    observation, as every observation before it was checked the same way; comparing it again each turn would make
    this check quadratic in episode length (docs/DESIGN.md, "Token-exact multi-turn")."""
    start = len(previous.ob)
    if len(ob) < context_len or ob[start:context_len] != list(previous.ac.tokens):
        return False
    head = min(HEAD_CHECK_TOKENS, len(prompt))
    return ob[:head] == prompt[:head]


def trajectory_to_turn_rows(trajectory: Trajectory, env_name: str = "env") -> list[TrainingRow]:
    """One :class:`TrainingRow` per turn: prompt = the observation the model saw, completion = its action.

    For envs whose observations do not extend the previous context (``Env.observations_extend = False``); every
    row trains exactly the tokens sampled at that turn, in the context they were sampled in. Turns that sampled
    no token are left out (a completion cannot be empty); a trajectory with none raises ``ValueError``.
    """
    if not trajectory.transitions:
        raise ValueError(f"{env_name}: trajectory has no transitions")
    rows = []
    for turn, tr in enumerate(trajectory.transitions):
        action = list(tr.ac.tokens)
        if action:
            rows.append(
                TrainingRow(
                    list(tr.ob),
                    action,
                    [1] * len(action),
                    _action_logprobs(tr, turn, env_name),
                    action_spans=[(0, len(action))],
                    first_turn=turn,
                )
            )
    if not rows:
        raise ValueError(f"{env_name}: trajectory sampled no tokens; a completion cannot be empty")
    return rows


def _action_logprobs(tr, turn: int, env_name: str) -> list[float]:
    action = tr.ac.tokens
    lp = tr.ac.logprobs if tr.ac.logprobs is not None else [0.0] * len(action)
    if len(lp) != len(action):
        raise ValueError(f"{env_name}: turn {turn} has {len(action)} action tokens but {len(lp)} logprobs")
    return [float(x) for x in lp]


def _drift_message(env_name: str, turn: int, context: list[int], ob: list[int]) -> str:
    i = next((k for k, (a, b) in enumerate(zip(context, ob)) if a != b), min(len(context), len(ob)))
    return (
        f"{env_name}: the observation of turn {turn} does not extend the previous observation + action "
        f"(first difference at token {i}: context has {len(context)} tokens, observation {len(ob)}). Build the "
        "next observation as previous observation + action tokens + new tokens (Renderer.extend_observation), "
        "or train with one row per turn (EnvGRPOConfig.training_rows='auto' or 'turn', or set "
        "Env.observations_extend = False)."
    )


def assemble_training_data(
    trajectory_groups: Sequence[TrajectoryGroup],
    advantages: Sequence[torch.Tensor],
    env_names: Sequence[str] | None = None,
) -> list[TrainingRow]:
    """All trajectories of all groups as :class:`TrainingRow` s, in order, each with its advantage and reward."""
    if len(advantages) != len(trajectory_groups):
        raise ValueError(f"assemble_training_data: {len(trajectory_groups)} groups but {len(advantages)} advantages")
    rows = []
    for gi, (group, adv) in enumerate(zip(trajectory_groups, advantages)):
        name = env_names[gi] if env_names is not None else (group.tags[0] if group.tags else f"group {gi}")
        for ti, (traj, total) in enumerate(zip(group.trajectories, group.get_total_rewards())):
            row = trajectory_to_data(traj, env_name=f"{name} (trajectory {ti})")
            row.advantage, row.reward = float(adv[ti]), float(total)
            rows.append(row)
    return rows
