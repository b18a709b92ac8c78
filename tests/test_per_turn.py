"""Per-turn training rows (observations that do not extend the previous context) and per-turn credit assignment."""

from __future__ import annotations

import pytest
import torch

from trl_envs import (
    EnvGroupBuilder,
    EnvGRPOTrainer,
    ListRLDataset,
    NonExtendingObservationError,
    StepResult,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
)
from trl_envs.core.types import Env
from trl_envs.training_data.credit import group_returns, rewards_to_go, row_token_advantages, turn_advantages
from trl_envs.training_data.row_layout import plan_rows
from trl_envs.training_data.rows import trajectory_to_data, trajectory_to_turn_rows

pytestmark = pytest.mark.timeout(300)


def _traj(turns, rewards=None, extending=False, extends_flag=True):
    """A trajectory of ``turns`` turns; observations extend each other only when ``extending``."""
    transitions, ob = [], [100, 101]
    for t in range(turns):
        action = [10 + t, 20 + t, 2]
        transitions.append(
            Transition(
                list(ob),
                TokensWithLogprobs(action, [-0.1 * (t + 1)] * 3),
                (rewards or [0.0] * turns)[t],
                t == turns - 1,
            )
        )
        ob = ob + action + [7, 7] if extending else [100 + t + 1, 200, 201]  # fresh board each turn
    return Trajectory(transitions, ob, "done", observations_extend=extends_flag)


# -- rows ---------------------------------------------------------------------------------------------------------


def test_turn_rows_train_exactly_each_turns_action_in_its_own_context():
    traj = _traj(3)
    rows = trajectory_to_turn_rows(traj, "board")
    assert [r.prompt_ids for r in rows] == [tr.ob for tr in traj.transitions]
    assert [r.completion_ids for r in rows] == [tr.ac.tokens for tr in traj.transitions]
    assert all(r.mask == [1, 1, 1] for r in rows)
    assert [r.logprobs for r in rows] == [tr.ac.logprobs for tr in traj.transitions]
    assert [r.first_turn for r in rows] == [0, 1, 2]
    with pytest.raises(NonExtendingObservationError, match="training_rows"):
        trajectory_to_data(traj, "board")


def test_trajectory_row_records_where_each_turns_action_is():
    row = trajectory_to_data(_traj(2, extending=True))
    assert row.action_spans == [(0, 3), (5, 8)]
    assert [row.mask[i] for i in range(8)] == [1, 1, 1, 0, 0, 1, 1, 1]


def test_plan_lays_out_one_block_per_turn_with_fillers_carrying_the_total():
    g = TrajectoryGroup(
        [_traj(1, [1.0]), _traj(3, [0.0, 0.0, 2.0]), _traj(2, [0.5, 0.0], extending=True)],
        [0.0, 0.0, 0.0],
        [{}, {}, {}],
    )
    plan = plan_rows([g], 3, "auto")
    # trajectory 1 does not extend -> per turn; 0 (one turn) and 2 extend -> one row; 3 blocks (longest: 3 turns)
    assert plan.num_blocks == 3 and plan.num_per_turn_trajectories == 1
    assert [r.reward for r in plan.rows] == [1.0, 2.0, 0.5] * 3  # every block has exactly the group's rewards
    real = [(r.trajectory, r.row.first_turn if r.row else None) for r in plan.rows]
    assert real == [(0, 0), (1, 0), (2, 0), (0, None), (1, 1), (2, None), (0, None), (1, 2), (2, None)]
    out = plan.rollout_output(pad_token_id=0, eos_token_id=2)
    assert out["env_mask"][3] == [0] and out["completion_ids"][3] == [2]  # a filler trains nothing
    assert plan.source_rows() == [0, 1, 2] * 3


def test_declared_non_extending_env_trains_per_turn_even_if_tokens_happen_to_extend():
    g = TrajectoryGroup([_traj(2, extending=True, extends_flag=False)] * 2, [0.0, 0.0], [{}, {}])
    assert plan_rows([g], 2, "auto").num_per_turn_trajectories == 2
    assert plan_rows([g], 2, "turn").num_blocks == 2


def test_trajectory_mode_refuses_non_extending_observations_and_names_the_group():
    g = TrajectoryGroup([_traj(2), _traj(2)], [0.0, 0.0], [{}, {}])
    with pytest.raises(NonExtendingObservationError, match="ChessBuilder.*trajectory 0.*turn 1"):
        plan_rows([g], 2, "trajectory", group_names=["ChessBuilder (row train/0/0)"])


def test_skipped_groups_and_padding_are_unscorable_fillers():
    g = TrajectoryGroup([_traj(1, [1.0]), _traj(1, [0.0])], [0.0, 0.0], [{}, {}])
    plan = plan_rows([None, g], 2)
    plan.pad_to(4)
    assert plan.num_blocks == 4
    assert [r.reward for r in plan.rows] == [None, None, 1.0, 0.0, None, None, None, None]
    assert plan.num_fillers == 6


# -- per-turn credit: a crafted 3-turn example, computed by hand ---------------------------------------------------


def _credit_group():
    # A: 3 turns, reward at the end; B: 1 turn; C: 2 turns plus a group reward of 0.3
    return TrajectoryGroup(
        [_traj(3, [0.0, 0.0, 1.0]), _traj(1, [0.5]), _traj(2, [0.0, 0.2])], [0.0, 0.0, 0.3], [{}, {}, {}]
    )


def test_rewards_to_go_pay_the_group_reward_on_the_last_turn():
    assert rewards_to_go([0.0, 0.2], group_reward=0.3) == pytest.approx([0.5, 0.5])
    assert rewards_to_go([0.0, 0.0, 1.0], gamma=0.5) == pytest.approx([0.25, 0.5, 1.0])


def test_per_turn_advantages_match_hand_computation():
    returns = group_returns(_credit_group())
    assert returns == [pytest.approx([1.0, 1.0, 1.0]), pytest.approx([0.5]), pytest.approx([0.5, 0.5])]
    # baselines over the episodes still running: t0 = (1 + 0.5 + 0.5)/3, t1 = (1 + 0.5)/2 (B ended), t2 = 1 (A only)
    adv = turn_advantages(returns, scale="none")
    assert adv[0] == pytest.approx([1 / 3, 0.25, 0.0])
    assert adv[1] == pytest.approx([-1 / 6])
    assert adv[2] == pytest.approx([-1 / 6, -0.25])
    std = (1 / 12) ** 0.5  # sample std of R[., 0] = (1.0, 0.5, 0.5)
    scaled = turn_advantages(returns, scale="group")
    assert scaled[0] == pytest.approx([(1 / 3) / (std + 1e-4), 0.25 / (std + 1e-4), 0.0])


def test_discounted_per_turn_advantages():
    adv = turn_advantages(group_returns(_credit_group(), gamma=0.5), scale="none")
    # returns: A (0.25, 0.5, 1.0), B (0.5,), C (0.25, 0.5); baselines t0 = 1/3, t1 = 0.5, t2 = 1.0
    assert adv[0] == pytest.approx([0.25 - 1 / 3, 0.0, 0.0])
    assert adv[1] == pytest.approx([0.5 - 1 / 3])
    assert adv[2] == pytest.approx([0.25 - 1 / 3, 0.0])


def test_single_turn_per_turn_credit_is_grpo():
    g = TrajectoryGroup([_traj(1, [r]) for r in (1.0, 0.0, 0.0, 0.5)], [0.0] * 4, [{}] * 4)
    adv = [a[0] for a in turn_advantages(group_returns(g), scale="group")]
    r = torch.tensor([1.0, 0.0, 0.0, 0.5])
    assert adv == pytest.approx(((r - r.mean()) / (r.std() + 1e-4)).tolist(), abs=1e-6)


def test_token_advantages_put_each_turns_value_on_its_action_tokens():
    group = _credit_group()
    group.trajectories[0] = _traj(3, [0.0, 0.0, 1.0], extending=True)  # one row with three action spans
    plan = plan_rows([group], 3)
    adv = row_token_advantages(plan, [group], width=14, scale="none")
    row0 = adv[0].tolist()  # trajectory A as one row: actions at 0..3, 5..8, 10..13; env tokens in between
    assert row0[0:3] == pytest.approx([1 / 3] * 3) and row0[3:5] == [0.0, 0.0]
    assert row0[5:8] == pytest.approx([0.25] * 3) and row0[10:13] == pytest.approx([0.0] * 3)
    assert adv[1, :3].tolist() == pytest.approx([-1 / 6] * 3)  # B, its only turn
    assert adv[5, :3].tolist() == pytest.approx([-0.25] * 3)  # C, turn 1 (block 1)
    assert adv[4].abs().sum() == 0  # block 1 of B: a filler


# -- the trainer --------------------------------------------------------------------------------------------------


class FreshBoardEnv(Env):
    """Each turn shows a fresh prompt (not the history); ``turns`` turns, fixed step rewards."""

    def __init__(self, renderer, turns: int, rewards: list[float], declare: bool):
        self.renderer, self.turns, self.rewards, self.t = renderer, turns, rewards, 0
        if declare:
            self.observations_extend = False

    def _ob(self):
        return self.renderer.build_generation_prompt([{"role": "user", "content": f"Board {self.t}: move."}])

    async def initial_observation(self):
        return self._ob(), self.renderer.get_stop_sequences()

    async def step(self, action, *, extra=None):
        reward = self.rewards[self.t]
        self.t += 1
        done = self.t >= self.turns
        return StepResult(reward, done, [] if done else self._ob(), self.renderer.get_stop_sequences())


class FreshBoardBuilder(EnvGroupBuilder):
    TURNS = (1, 3, 2, 3)
    REWARDS = ([1.0], [0.0, 0.0, 0.5], [0.2, 0.0], [0.0, -0.1, 0.0])

    def __init__(self, renderer, declare):
        self.renderer, self.declare = renderer, declare

    async def make_envs(self):
        return [FreshBoardEnv(self.renderer, n, list(r), self.declare) for n, r in zip(self.TURNS, self.REWARDS)]


def _trainer(cpu_grpo_config, tiny_model_path, tokenizer, renderer, declare=True, **overrides):
    dataset = ListRLDataset([FreshBoardBuilder(renderer, declare) for _ in range(8)], batch_size=2)
    config = cpu_grpo_config(**{"max_steps": 2, "max_completion_length": 6, **overrides})
    return EnvGRPOTrainer(tiny_model_path, config, dataset, processing_class=tokenizer)


@pytest.mark.parametrize("declare", [True, False], ids=["declared", "detected"])
def test_non_extending_env_trains_one_row_per_turn(declare, cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    trainer = _trainer(cpu_grpo_config, tiny_model_path, tokenizer, renderer, declare=declare)
    trainer.model.train()
    keys = trainer.train_dataset["prompt"][:2]
    out = trainer.generation_batch(keys)
    groups = trainer.last_rollout.groups
    # 2 groups x 3 blocks (longest episode: 3 turns) x 4 rows; the single-turn trajectory 0 is one row either way
    # ("auto" trains a 1-turn trajectory as one row unless the env declares otherwise)
    assert out["completion_ids"].shape[0] == 24
    real = out["completion_mask"] * out["tool_mask"]
    n_actions = sum(len(g.trajectories[i].transitions) for g in groups for i in range(4))
    assert int((real.sum(1) > 0).sum()) == n_actions  # one trained row per turn, fillers train nothing
    # every trained row is exactly one turn: its prompt is that turn's observation and its mask covers the action
    turns = {(tuple(tr.ob), tuple(tr.ac.tokens)) for g in groups for t in g.trajectories for tr in t.transitions}
    for b in range(out["completion_ids"].shape[0]):
        n = int(real[b].sum())
        if n == 0:
            continue
        prompt = out["prompt_ids"][b][out["prompt_mask"][b].bool()].tolist()
        action = out["completion_ids"][b][:n].tolist()
        assert (tuple(prompt), tuple(action)) in turns
        assert real[b, n:].sum() == 0
    # every row of a trajectory carries its trajectory's advantage
    totals = torch.tensor([t for g in groups for t in g.get_total_rewards()]).view(2, 4)
    expected = (totals - totals.mean(1, keepdim=True)) / (totals.std(1, keepdim=True) + 1e-4)
    adv = out["advantages"].view(2, 3, 4)  # group, block, trajectory
    for block in range(3):
        assert torch.allclose(adv[:, block].float(), expected.float(), atol=1e-4)
    trainer.train()  # and a full training run goes through
    logged = [h for h in trainer.state.log_history if "rows/per_turn_fraction" in h]
    assert logged and logged[0]["rows/per_turn_fraction"] >= 0.75


def test_trajectory_rows_setting_refuses_a_non_extending_env(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    trainer = _trainer(cpu_grpo_config, tiny_model_path, tokenizer, renderer, declare=False, training_rows="trajectory")
    trainer.model.train()
    keys = trainer.train_dataset["prompt"][:2]
    with pytest.raises(NonExtendingObservationError, match=r"FreshBoardBuilder \(row train/0/0\), trajectory 1"):
        trainer.generation_batch(keys)


def test_per_turn_credit_reaches_trls_loss_as_per_token_advantages(
    cpu_grpo_config, tiny_model_path, tokenizer, renderer
):
    trainer = _trainer(
        cpu_grpo_config,
        tiny_model_path,
        tokenizer,
        renderer,
        credit_assignment="per_turn",
        scale_rewards="none",
        steps_per_generation=2,
    )
    trainer.model.train()
    keys = trainer.train_dataset["prompt"][:2]
    out = trainer.generation_batch(keys)
    assert out["advantages"].shape == out["completion_ids"].shape
    # by hand, for the fixed rewards: returns A (1.0), B (0.5, 0.5, 0.5), C (0.2, 0.0), D (-0.1, -0.1, 0.0);
    # baselines over the episodes still running: t0 = 1.6/4 = 0.4, t1 = (0.5 + 0.0 - 0.1)/3, t2 = (0.5 + 0.0)/2
    t1 = 0.4 / 3
    expected_by_turn = {0: [0.6], 1: [0.1, 0.5 - t1, 0.25], 2: [-0.2, 0.0 - t1], 3: [-0.5, -0.1 - t1, -0.25]}
    adv, real = out["advantages"], (out["completion_mask"] * out["tool_mask"]).bool()
    for block in range(3):
        for i in range(4):
            for g in range(2):
                b = g * 12 + block * 4 + i
                if block < len(expected_by_turn[i]):
                    assert adv[b][real[b]].tolist() == pytest.approx([expected_by_turn[i][block]] * int(real[b].sum()))
                else:
                    assert not real[b].any()
    trainer.train()
