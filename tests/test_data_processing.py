"""Advantages and training rows: what TRL ends up training on."""

import math
import statistics

import pytest
import torch

from trl_envs import (
    NonExtendingObservationError,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
    assemble_training_data,
    compute_advantages,
    remove_constant_reward_groups,
    trajectory_to_data,
)


def _group(step_rewards, group_rewards=None, tags=("toy",)):
    trajs = [
        Trajectory([Transition([1, 2], TokensWithLogprobs([3, 4], [-0.3, -0.4]), r, True)], final_ob=[1, 2, 3, 4])
        for r in step_rewards
    ]
    group_rewards = list(group_rewards) if group_rewards is not None else [0.0] * len(trajs)
    return TrajectoryGroup(trajs, group_rewards, [{} for _ in trajs], tags=list(tags))


def _trl_advantages(rewards):
    """TRL GRPO's formula, written independently: (r - group mean) / (unbiased group std + 1e-4)."""
    mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
    return [(r - mean) / (std + 1e-4) for r in rewards]


# -- advantages --------------------------------------------------------------------------------------------------


def test_group_scaling_matches_trls_formula_per_group():
    groups = [_group([1.0, 0.0, 0.0, 0.5]), _group([0.2, 0.9]), _group([3.0, -1.0, 2.0])]
    advs = compute_advantages(groups, loss_fn="grpo")
    assert len(advs) == 3
    for g, a in zip(groups, advs):
        assert a.tolist() == pytest.approx(_trl_advantages(g.get_total_rewards()), abs=1e-9)
        assert float(a.sum()) == pytest.approx(0.0, abs=1e-9)  # centred within its own group


def test_advantages_use_total_reward_including_group_reward():
    # same step rewards, different group rewards: the signal comes from the group rewards
    (adv,) = compute_advantages([_group([1.0, 1.0], group_rewards=[0.0, 2.0])], scale="none")
    assert adv.tolist() == pytest.approx([-1.0, 1.0])


def test_dr_grpo_and_none_only_centre():
    g = _group([1.0, 0.0, 0.0, 3.0])
    for kwargs in ({"loss_fn": "dr_grpo"}, {"loss_fn": "importance_sampling"}, {"scale": "none"}):
        (adv,) = compute_advantages([g], **kwargs)
        assert adv.tolist() == pytest.approx([0.0, -1.0, -1.0, 2.0]), kwargs


def test_batch_scaling_divides_by_the_std_of_all_rewards():
    groups = [_group([1.0, 0.0]), _group([4.0, 2.0, 0.0])]
    everything = [1.0, 0.0, 4.0, 2.0, 0.0]
    std = statistics.stdev(everything)
    a, b = compute_advantages(groups, scale="batch")
    assert a.tolist() == pytest.approx([0.5 / (std + 1e-4), -0.5 / (std + 1e-4)])
    assert b.tolist() == pytest.approx([2 / (std + 1e-4), 0.0, -2 / (std + 1e-4)])


def test_group_of_one_and_constant_groups_get_zero_not_nan():
    single, constant = compute_advantages([_group([5.0]), _group([0.7, 0.7, 0.7])], loss_fn="grpo")
    assert single.tolist() == [0.0]
    assert constant.tolist() == pytest.approx([0.0, 0.0, 0.0], abs=1e-9)
    (single_batch,) = compute_advantages([_group([5.0])], scale="batch")
    assert single_batch.tolist() == [0.0]


def test_unknown_loss_or_scale_is_rejected():
    with pytest.raises(ValueError, match="unknown loss_fn 'reinforce'"):
        compute_advantages([_group([1.0, 0.0])], loss_fn="reinforce")
    with pytest.raises(ValueError, match="scale must be"):
        compute_advantages([_group([1.0, 0.0])], scale="global")


def test_remove_constant_reward_groups():
    mixed = _group([1.0, 0.0])
    constant = _group([0.5, 0.5, 0.5])
    mixed_by_group_reward = _group([1.0, 1.0], group_rewards=[0.0, 1.0])
    constant_total = _group([1.0, 0.0], group_rewards=[0.0, 1.0])  # step + group rewards are equal
    kept = remove_constant_reward_groups([mixed, constant, mixed_by_group_reward, constant_total])
    assert kept == [mixed, mixed_by_group_reward]


# -- training rows -----------------------------------------------------------------------------------------------


def _two_turn_trajectory():
    prompt = [10, 11, 12]
    a1 = TokensWithLogprobs([20, 21, 2], [-0.1, -0.2, -0.3])
    env = [30, 31]
    a2 = TokensWithLogprobs([22, 2], [-0.4, -0.5])
    ob2 = prompt + a1.tokens + env
    return Trajectory([Transition(prompt, a1, 0.0, False), Transition(ob2, a2, 1.0, True)], final_ob=ob2 + a2.tokens)


def test_trajectory_to_data_masks_and_logprobs():
    row = trajectory_to_data(_two_turn_trajectory())
    assert row.prompt_ids == [10, 11, 12]
    assert row.completion_ids == [20, 21, 2, 30, 31, 22, 2]
    assert row.mask == [1, 1, 1, 0, 0, 1, 1]
    assert row.logprobs == pytest.approx([-0.1, -0.2, -0.3, 0.0, 0.0, -0.4, -0.5])


def test_missing_logprobs_become_zero_and_wrong_count_is_rejected():
    tr = Trajectory([Transition([1], TokensWithLogprobs([5, 6], None), 1.0, True)], final_ob=[])
    assert trajectory_to_data(tr).logprobs == [0.0, 0.0]
    bad = Trajectory([Transition([1], TokensWithLogprobs([5, 6], [-0.1]), 1.0, True)], final_ob=[])
    with pytest.raises(ValueError, match="my_env: turn 0 has 2 action tokens but 1 logprobs"):
        trajectory_to_data(bad, env_name="my_env")


def test_empty_trajectories_are_rejected():
    with pytest.raises(ValueError, match="no transitions"):
        trajectory_to_data(Trajectory([], final_ob=[]), env_name="e")
    with pytest.raises(ValueError, match="sampled no tokens"):
        trajectory_to_data(Trajectory([Transition([1], TokensWithLogprobs([]), 0.0, True)], final_ob=[1]), "e")


@pytest.mark.parametrize(
    "second_ob, where",
    [
        ([10, 11, 12, 99, 30], "rewritten history"),  # an action token changed (re-tokenized)
        ([10, 11, 30, 31], "history cut"),  # thinking stripped / context truncated
        ([40, 41, 42], "fresh board"),  # a new observation each turn
    ],
)
def test_non_extending_observation_names_env_and_turn(second_ob, where):
    tr = Trajectory(
        [
            Transition([10, 11, 12], TokensWithLogprobs([20, 2]), 0.0, False),
            Transition(second_ob, TokensWithLogprobs([22, 2]), 1.0, True),
        ],
        final_ob=[],
    )
    with pytest.raises(
        NonExtendingObservationError,
        match=r"BoardGameEnv: the observation of turn 1 does not "
        r"extend",
    ) as info:
        trajectory_to_data(tr, env_name="BoardGameEnv")
    assert isinstance(info.value, ValueError), where


def test_assemble_training_data_attaches_advantages_and_names_groups():
    groups = [_group([1.0, 0.0], group_rewards=[0.5, 0.0]), _group([2.0, 2.0, 5.0], tags=())]
    advs = compute_advantages(groups, scale="none")
    rows = assemble_training_data(groups, advs)
    assert len(rows) == 5
    assert [r.reward for r in rows] == pytest.approx([1.5, 0.0, 2.0, 2.0, 5.0])
    assert [r.advantage for r in rows] == pytest.approx([0.75, -0.75, -1.0, -1.0, 2.0])
    assert all(r.mask == [1, 1] and r.completion_ids == [3, 4] for r in rows)
    assert not any(math.isnan(r.advantage) for r in rows)

    broken = _group([1.0, 0.0], tags=("chess",))
    broken.trajectories[1].transitions.append(Transition([7, 7], TokensWithLogprobs([1]), 0.0, True))
    with pytest.raises(NonExtendingObservationError, match=r"chess \(trajectory 1\).*turn 1"):
        assemble_training_data([broken], compute_advantages([broken]))
    with pytest.raises(ValueError, match="2 groups but 1 advantages"):
        assemble_training_data(groups, advs[:1])


def test_advantages_are_tensors_per_group():
    advs = compute_advantages([_group([1.0, 0.0]), _group([1.0, 2.0, 3.0])])
    assert all(isinstance(a, torch.Tensor) for a in advs)
    assert [a.shape[0] for a in advs] == [2, 3]


def test_rewritten_system_prompt_is_caught_by_the_head_check():
    prompt = list(range(100, 180))
    a1 = TokensWithLogprobs([20, 2])
    second = [999] + prompt[1:] + a1.tokens + [30]  # a per-turn template edit of the first token; suffix intact
    tr = Trajectory(
        [Transition(prompt, a1, 0.0, False), Transition(second, TokensWithLogprobs([22, 2]), 1.0, True)], final_ob=[]
    )
    with pytest.raises(NonExtendingObservationError, match=r"turn 1 .*\(first difference at token 0"):
        trajectory_to_data(tr, env_name="TemplateEnv")


def test_long_episode_row_is_the_concatenation_of_turns():
    ob, transitions = [1, 2, 3], []
    for turn in range(300):
        action = TokensWithLogprobs([1000 + turn, 2], [-0.5, -0.25])
        transitions.append(Transition(ob, action, 0.0, turn == 299))
        ob = ob + action.tokens + [7, 8]
    row = trajectory_to_data(Trajectory(transitions, final_ob=ob))
    assert [1, 2, 3] + row.completion_ids == ob[:-2]
    assert sum(row.mask) == 600 and row.action_spans[-1] == (len(row.completion_ids) - 2, len(row.completion_ids))
