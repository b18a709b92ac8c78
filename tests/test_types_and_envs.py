"""The env contract's data types and the built-in envs' reward semantics (no model needed beyond the tokenizer)."""

import asyncio
import random

import pytest

from trl_envs import (
    ListRLDataset,
    MessageTokenEnv,
    ProblemEnv,
    ProblemGroupBuilder,
    StepResult,
    TokensWithLogprobs,
    Trajectory,
    TrajectoryGroup,
    Transition,
    make_env_dataset,
)
from trl_envs.envs.arithmetic import ArithmeticEnv
from trl_envs.envs.guess_number import GuessNumberEnv, GuessNumberGroupBuilder


def _traj(*step_rewards: float) -> Trajectory:
    transitions = [
        Transition(ob=[1, 2], ac=TokensWithLogprobs([3]), reward=r, episode_done=i == len(step_rewards) - 1)
        for i, r in enumerate(step_rewards)
    ]
    return Trajectory(transitions, final_ob=[1, 2, 3])


def _text_action(tokenizer, text: str, end: bool = True) -> list[int]:
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids + [tokenizer.convert_tokens_to_ids("<|im_end|>")] if end else ids


# -- TrajectoryGroup ---------------------------------------------------------------------------------------------


def test_total_reward_is_step_rewards_plus_group_reward():
    group = TrajectoryGroup(
        [_traj(0.5, 0.25), _traj(1.0), _traj(-0.1, -0.1, 2.0)],
        group_rewards=[1.0, -2.0, 0.0],
        group_metrics=[{}, {}, {}],
    )
    assert group.get_total_rewards() == pytest.approx([1.75, -1.0, 1.8])
    assert [t.step_reward for t in group.trajectories] == pytest.approx([0.75, 1.0, 1.8])


def test_trajectory_group_rejects_mismatched_group_rewards():
    with pytest.raises(ValueError, match="2 trajectories but 1 group rewards"):
        TrajectoryGroup([_traj(1.0), _traj(0.0)], group_rewards=[0.0], group_metrics=[{}, {}])


def test_num_action_tokens_counts_all_turns():
    tr = Trajectory(
        [
            Transition([1], TokensWithLogprobs([5, 6, 7]), 0.0, False),
            Transition([1, 5, 6, 7, 9], TokensWithLogprobs([8]), 1.0, True),
        ],
        final_ob=[],
    )
    assert tr.num_action_tokens == 4


def test_list_rl_dataset_batches_cover_all_builders_in_order():
    builders = [object() for _ in range(5)]
    ds = ListRLDataset(builders, batch_size=2)
    assert len(ds) == 3
    assert [list(ds.get_batch(i)) for i in range(3)] == [builders[0:2], builders[2:4], builders[4:5]]
    with pytest.raises(IndexError):
        ds.get_batch(3)
    with pytest.raises(ValueError):
        ListRLDataset(builders, batch_size=0)


# -- ProblemEnv / ProblemGroupBuilder ----------------------------------------------------------------------------


class _SevenEnv(ProblemEnv):
    """Right when the text contains 7; well formed when it is only digits."""

    def get_question(self):
        return "What is 3 + 4?"

    def check_answer(self, sample_str):
        return "7" in sample_str

    def check_format(self, sample_str):
        return sample_str.isdigit()

    def get_reference_answer(self):
        return "7"


@pytest.mark.parametrize(
    "text, end, expected",
    [
        ("7", True, 1.0),  # right, well formed
        ("answer: 7", True, 0.9),  # right, badly formed
        ("7", False, 0.9),  # right, but cut off before <|im_end|>
        ("8", True, 0.0),  # wrong, well formed
        ("eight", True, -0.1),  # wrong, badly formed
        ("8", False, -0.1),  # wrong and cut off
    ],
)
def test_problem_env_reward_table(renderer, tokenizer, text, end, expected):
    env = _SevenEnv(renderer, format_coef=0.1)
    result = asyncio.run(env.step(_text_action(tokenizer, text, end)))
    assert isinstance(result, StepResult)
    assert result.episode_done
    assert result.reward == pytest.approx(expected)
    assert result.metrics["correct"] == float(expected > 0.5)


@pytest.mark.parametrize(
    "text, end, expected",
    [
        ("7", True, 1.0),
        ("7", False, 0.9),
        ("8", True, 0.0),
        ("hello world", True, -0.1),
        ("", True, -0.1),
        ("The answer is 7.", True, -0.1),
        ("12", False, -0.1),
        ("Let's add: 3 + 4 = 7", True, 1.0),
        ("3+4=7", True, 1.0),
        ("3 + 4 = 8", True, 0.0),
        ("3 + 4 = 7", False, 0.9),
        ("7 or 8", True, 0.0),
        ("x7", True, -0.1),
        ("7.5", True, -0.1),
        ("-7", True, 0.0),
    ],
)
def test_arithmetic_unparsable_output_gets_format_penalty_not_a_crash(renderer, tokenizer, text, end, expected):
    env = ArithmeticEnv(renderer, 3, 4)
    result = asyncio.run(env.step(_text_action(tokenizer, text, end)))
    assert result.reward == pytest.approx(expected)
    assert result.logs["reference"] == "7"


def test_arithmetic_garbage_tokens_do_not_crash(renderer, tokenizer):
    env = ArithmeticEnv(renderer, 3, 4)
    special = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|endoftext|>")]
    for action in ([special[0]], [special[1], 300, 301], list(range(3, 40))):
        result = asyncio.run(env.step(action))
        assert result.reward == pytest.approx(-0.1)


def test_problem_env_initial_observation_is_the_rendered_question(renderer, tokenizer):
    env = ArithmeticEnv(renderer, 2, 5)
    ob, stop = asyncio.run(env.initial_observation())
    expected = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 5?"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert ob == list(expected)
    assert stop == [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def test_problem_group_builder_rebuilds_the_same_problem(renderer):
    calls = []

    def thunk():
        calls.append(1)
        return ArithmeticEnv(renderer, 2, 3)

    envs = asyncio.run(ProblemGroupBuilder(thunk, num_envs=4, dataset_name="sums").make_envs())
    assert len(calls) == 4
    assert len(envs) == 4 and len({id(e) for e in envs}) == 4  # fresh envs, not one shared instance
    assert {e.get_question() for e in envs} == {"What is 2 + 3?"}
    assert ProblemGroupBuilder(thunk, 2, dataset_name="sums").logging_tags() == ["sums"]


def test_problem_group_builder_rejects_a_thunk_that_samples_problems(renderer):
    rng = random.Random(0)

    def thunk():  # the classic bug: sampling the problem inside the thunk
        return ArithmeticEnv(renderer, rng.randint(0, 1000), rng.randint(0, 1000))

    with pytest.raises(ValueError, match=r"ProblemGroupBuilder\('sums'\).*different problems.*same problem"):
        asyncio.run(ProblemGroupBuilder(thunk, num_envs=4, dataset_name="sums").make_envs())


def test_problem_group_builder_rejects_empty_group(renderer):
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        ProblemGroupBuilder(lambda: ArithmeticEnv(renderer, 1, 1), num_envs=0)


def test_arithmetic_dataset_batches_are_reproducible_and_train_differs_from_test(renderer):
    train, test = asyncio.run(make_env_dataset("arithmetic", renderer, batch_size=3, group_size=2)())

    def questions(ds, i):
        return [asyncio.run(b.make_envs())[0].get_question() for b in ds.get_batch(i)]

    assert questions(train, 0) == questions(train, 0)
    assert len(questions(train, 0)) == 3
    assert questions(train, 0) + questions(train, 1) != questions(test, 0) + questions(test, 1)
    with pytest.raises(KeyError, match="unknown env 'nope'; known envs: .*'arithmetic'"):
        make_env_dataset("nope", renderer)


# -- guess_number ------------------------------------------------------------------------------------------------


def _play(env: MessageTokenEnv, actions):
    async def go():
        ob, _ = await env.initial_observation()
        results = []
        for a in actions:
            results.append(await env.step(a))
        return ob, results

    return asyncio.run(go())


def test_guess_number_rewards_and_hints(renderer, tokenizer):
    env = MessageTokenEnv(GuessNumberEnv(target=5, low=1, high=16, max_guesses=6), renderer)
    _, results = _play(env, [_text_action(tokenizer, s) for s in ("3", "9", "5")])
    assert [r.reward for r in results] == pytest.approx([-0.1, -0.1, 1.0])
    assert [r.episode_done for r in results] == [False, False, True]
    hint1 = tokenizer.decode(results[0].next_observation, skip_special_tokens=True)
    hint2 = tokenizer.decode(results[1].next_observation, skip_special_tokens=True)
    assert hint1.rstrip().endswith("Higher.\nassistant")
    assert hint2.rstrip().endswith("Lower.\nassistant")
    assert results[2].metrics == {"parse_ok": 1.0, "win": 1.0, "guesses": 3.0}


@pytest.mark.parametrize("text, end", [("hello", True), ("5", False), ("5 or 6", True), ("", True)])
def test_guess_number_unparsable_guess_gets_penalty_and_a_hint(renderer, tokenizer, text, end):
    # target 5: a truncated "5" is still unparsable (cut off, not a finished answer), not a win
    env = MessageTokenEnv(GuessNumberEnv(target=5, low=1, high=16), renderer)
    _, (result,) = _play(env, [_text_action(tokenizer, text, end)])
    assert result.reward == pytest.approx(-0.1)
    assert not result.episode_done
    assert result.metrics["parse_ok"] == 0.0
    assert "Reply with just a number between 1 and 16." in tokenizer.decode(result.next_observation)


def test_guess_number_ends_after_max_guesses(renderer, tokenizer):
    env = MessageTokenEnv(GuessNumberEnv(target=5, max_guesses=2), renderer)
    _, results = _play(env, [_text_action(tokenizer, "1"), _text_action(tokenizer, "2")])
    assert [r.episode_done for r in results] == [False, True]
    assert results[-1].metrics["win"] == 0.0
    assert results[-1].reward == pytest.approx(-0.1)


def test_guess_number_group_shares_the_target(renderer):
    envs = asyncio.run(GuessNumberGroupBuilder(renderer, target=7, group_size=3).make_envs())
    assert len(envs) == 3 and len({id(e) for e in envs}) == 3
    assert {e.message_env.target for e in envs} == {7}


def test_guess_number_rejects_target_out_of_range():
    with pytest.raises(ValueError, match="outside"):
        GuessNumberEnv(target=20, low=1, high=16)
