"""Pairwise-judge group rewards: mean wins minus losses, position-bias cancelling, async and model judges, the
judged_arithmetic example env, and one short training run."""

from __future__ import annotations

import pytest

from trl_envs import TokensWithLogprobs, run_rollout_batch
from trl_envs.core.judge import PairwiseJudgeGroupBuilder, pairwise_rewards
from trl_envs.envs.judged_arithmetic import CloserToJudge, QuestionGroupBuilder
from trl_envs.rollout.event_loop import run_sync
from trl_envs.rollout.model_judge import ModelJudge
from trl_envs.samplers.text_policy import TextPolicySampler

pytestmark = pytest.mark.timeout(300)


def test_rewards_are_mean_wins_minus_losses_on_a_hand_example():
    # target 7: "7" beats "5" (closer), any number beats "x", the two "7"s tie.
    out = run_sync(lambda: pairwise_rewards(["5", "7", "x", "7"], CloserToJudge(7)))
    rewards = [r for r, _ in out]
    assert rewards == pytest.approx([-1 / 3, 2 / 3, -1.0, 2 / 3])
    assert sum(rewards) == pytest.approx(0.0)
    assert out[1][1] == pytest.approx({"judge/win": 2 / 3, "judge/loss": 0.0, "judge/tie": 1 / 3})
    assert out[2][1]["judge/loss"] == 1.0


def test_both_orders_cancels_a_position_bias():
    def prefers_first(a, b):
        return 1

    assert [r for r, _ in run_sync(lambda: pairwise_rewards(["a", "b", "c"], prefers_first))] == [1.0, 0.0, -1.0]
    assert [r for r, _ in run_sync(lambda: pairwise_rewards(["a", "b", "c"], prefers_first, both_orders=True))] == [
        0.0,
        0.0,
        0.0,
    ]


def test_async_judges_and_bad_verdicts():
    async def longer_wins(a, b):
        return (len(a) > len(b)) - (len(a) < len(b))

    assert [r for r, _ in run_sync(lambda: pairwise_rewards(["aaa", "a", "aa"], longer_wins))] == [1.0, -1.0, 0.0]

    def sloppy(a, b):
        return 3

    with pytest.raises(ValueError, match="judge sloppy returned 3 comparing 'x' with 'y'"):
        run_sync(lambda: pairwise_rewards(["x", "y"], sloppy))
    with pytest.raises(ValueError, match="at least 2"):
        run_sync(lambda: pairwise_rewards(["x"], sloppy))


def test_model_judge_scores_all_pairs_in_one_batched_call(tokenizer, renderer):
    class JudgeModel:  # prefers the response that mentions "good"; a model that answers in prose
        calls = []

        def sample(self, requests):
            self.calls.append(len(requests))
            outs = []
            for r in requests:
                text = tokenizer.decode(r.prompt)
                a = text.split("Response A: ")[1].split("\n")[0]
                b = text.split("Response B: ")[1].split("<|im_end|>")[0].split("\n")[0]
                verdict = "A" if "good" in a and "good" not in b else "B" if "good" in b and "good" not in a else "?"
                ids = tokenizer.encode(f"a fair pick: {verdict}", add_special_tokens=False) + [
                    renderer.end_of_turn_token_id
                ]
                outs.append(TokensWithLogprobs(ids))
            return outs

    judge = ModelJudge(JudgeModel(), renderer, task="Say something nice.")
    out = run_sync(lambda: pairwise_rewards(["good", "bad", "good too"], judge))
    assert JudgeModel.calls == [3]  # one call for the 3 pairs
    assert [r for r, _ in out] == [0.5, -1.0, 0.5]  # the two "good" answers tie (unreadable verdict)
    assert judge.num_unreadable == 1


def test_judged_group_rollout_adds_the_judges_reward(tokenizer, renderer):
    answers = iter(["8", "7", "x", "7"])  # 3 + 4 = 7
    inner = QuestionGroupBuilder(renderer, 3, 4, group_size=4)
    builder = PairwiseJudgeGroupBuilder(inner, CloserToJudge(7), renderer)
    result = run_rollout_batch([builder], TextPolicySampler(renderer, lambda text: next(answers)))
    group = result.groups[0]
    by_answer = {builder.completion(t): r for t, r in zip(group.trajectories, group.get_total_rewards())}
    assert by_answer == pytest.approx({"8": -1 / 3, "7": 2 / 3, "x": -1.0})
    assert [t.step_reward for t in group.trajectories] == [0.0] * 4  # the env gives nothing; the judge everything
    with pytest.raises(ValueError, match="around QuestionGroupBuilder: give a renderer"):
        PairwiseJudgeGroupBuilder(inner, CloserToJudge(7))


def test_judged_arithmetic_trains_with_env_grpo_trainer(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    from trl_envs import EnvGRPOTrainer, make_env_dataset

    args = cpu_grpo_config(max_completion_length=6, max_turns=1)
    env = make_env_dataset("judged_arithmetic", renderer, group_size=4, batch_size=2, num_batches=4)
    trainer = EnvGRPOTrainer(tiny_model_path, args, env, processing_class=tokenizer)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "env/judged_arithmetic/reward/total" in h]
    assert logged and "env/judged_arithmetic/correct" in logged[0]
    for g in trainer.last_rollout.groups:
        assert sum(g.get_total_rewards()) == pytest.approx(0.0)


def test_model_judge_of_every_group_of_a_batch_shares_one_call(tokenizer, renderer):
    """Inside a rollout batch, the groups judged at the same time send their pairs in ONE judge call."""

    class JudgeModel:
        calls = []

        def sample(self, requests):
            self.calls.append(len(requests))
            ids = tokenizer.encode("A", add_special_tokens=False) + [renderer.end_of_turn_token_id]
            return [TokensWithLogprobs(list(ids)) for _ in requests]

    judge = ModelJudge(JudgeModel(), renderer, task="3 + 4")
    builders = [
        PairwiseJudgeGroupBuilder(QuestionGroupBuilder(renderer, 3, 4, group_size=3), judge, renderer) for _ in range(4)
    ]
    policy = TextPolicySampler(renderer, lambda text: "7")
    result = run_rollout_batch(builders, policy)
    assert JudgeModel.calls == [4 * 3]  # 3 pairs per group, 4 groups: one call, not one per group
    assert policy.num_calls == 1 and result.num_sampler_calls == 2
