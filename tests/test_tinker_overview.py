"""The Tinker cookbook's RL overview, snippet by snippet, run as written on trl_envs.

Each test holds one snippet of the overview (the cookbook's "Reinforcement Learning > Overview" page) verbatim.
Only the imports are changed: where a snippet imports ``tinker_cookbook.rl...`` names that trl_envs re-implements,
it imports them from ``trl_envs`` instead (marked "ADAPTED IMPORT"). Names the overview leaves to the reader
(``renderer``, ``check_correct``, a question) are defined around the snippet, and the overview's ``...`` (elided
arguments) are filled in and marked "FILLED IN".
"""

from __future__ import annotations

import pytest

from trl_envs import Renderer, run_rollout_batch
from trl_envs.core.types import EnvContractError
from trl_envs.samplers.text_policy import TextPolicySampler

pytestmark = pytest.mark.timeout(120)


def reply_with(renderer: Renderer, text: str, close: bool = True) -> TextPolicySampler:
    """A scripted policy answering ``text`` (closed with the end-of-turn token unless ``close`` is false)."""
    sampler = TextPolicySampler(renderer, lambda prompt: text)
    if not close:
        real = sampler.sample

        def cut(requests):
            out = real(requests)
            for o in out:
                o.tokens, o.logprobs, o.finish_reason = o.tokens[:-1], o.logprobs[:-1], "length"
            return out

        sampler.sample = cut
    return sampler


def test_architecture_tree_names_and_shapes():
    """The overview's architecture tree: the classes, their methods and the data shapes."""
    import trl_envs
    from trl_envs import TokensWithLogprobs, Trajectory, TrajectoryGroup, Transition

    for name, methods in {
        "RLDataset": ["get_batch", "__len__"],
        "EnvGroupBuilder": ["make_envs", "compute_group_rewards", "cleanup", "logging_tags"],
        "Env": ["initial_observation", "step"],
    }.items():
        cls = getattr(trl_envs, name)
        assert all(callable(getattr(cls, m)) for m in methods), name
    # Trajectory = list[Transition(ob, ac, reward, episode_done)]
    t = Transition([1, 2], TokensWithLogprobs([3]), 1.0, True)
    assert (t.ob, t.ac.tokens, t.reward, t.episode_done) == ([1, 2], [3], 1.0, True)
    # TrajectoryGroup = list[Trajectory] + final_rewards + metrics
    group = TrajectoryGroup([Trajectory([t], [])], [0.5], [{"m": 1.0}])
    assert group.get_total_rewards() == [1.5]


# -- Env --------------------------------------------------------------------------------------------------------


def make_snippet_env_class(renderer, check_correct):
    # ---- snippet "Env" (ADAPTED IMPORT: trl_envs instead of tinker_cookbook.rl.types) ----
    from trl_envs import Env, StepResult

    class MyEnv(Env):
        async def initial_observation(self):
            prompt = renderer.build_generation_prompt([{"role": "user", "content": self.question}])
            return prompt, renderer.get_stop_sequences()

        async def step(self, action, *, extra=None):
            response = renderer.parse_response(action)
            reward = 1.0 if check_correct(response) else 0.0
            return StepResult(
                reward=reward, episode_done=True, next_observation=[], next_stop_condition=[]
            )  # FILLED IN: the overview's "..."

    # ---- end of snippet ----
    return MyEnv


def check_correct(response) -> bool:
    message, ok = response  # the cookbook's parse_response result unpacks as (message, ok)
    return ok and message["content"].strip() == "5"


def snippet_env_with_question(renderer):
    MyEnv = make_snippet_env_class(renderer, check_correct)

    class QuestionEnv(MyEnv):  # the overview leaves MyEnv's constructor out; MyGroupBuilder calls MyEnv(q)
        def __init__(self, question):
            self.question = question

    return QuestionEnv


def test_env_snippet_plays_and_scores(renderer):
    from trl_envs import EnvGroupBuilder

    MyEnv = snippet_env_with_question(renderer)

    class OneQuestion(EnvGroupBuilder):
        async def make_envs(self):
            return [MyEnv("What is 2 + 3?"), MyEnv("What is 2 + 3?")]

    right = run_rollout_batch([OneQuestion()], reply_with(renderer, "5")).groups[0]
    wrong = run_rollout_batch([OneQuestion()], reply_with(renderer, "7")).groups[0]
    cut = run_rollout_batch([OneQuestion()], reply_with(renderer, "5", close=False)).groups[0]
    assert right.get_total_rewards() == [1.0, 1.0]
    assert wrong.get_total_rewards() == [0.0, 0.0]
    assert cut.get_total_rewards() == [0.0, 0.0]  # not ended on the end-of-turn token: ok is False
    traj = right.trajectories[0]
    assert traj.transitions[0].ob == renderer.build_generation_prompt([{"role": "user", "content": "What is 2 + 3?"}])


def test_parse_response_unpacks_and_keeps_attributes(renderer):
    tokens = renderer.tokenizer.encode("hello", add_special_tokens=False)
    parsed = renderer.parse_response(tokens + [renderer.end_of_turn_token_id])
    message, ok = parsed
    assert message == parsed.message == {"role": "assistant", "content": "hello"}
    assert ok is True and parsed.ok and parsed.end == "stop"
    message, ok = renderer.parse_response(tokens)
    assert ok is False and message["content"] == "hello"


# -- ProblemEnv -------------------------------------------------------------------------------------------------


def snippet_math_env():
    # ---- snippet "ProblemEnv" (ADAPTED IMPORT: trl_envs.core.problem_env instead of tinker_cookbook.rl.problem_env)
    from trl_envs.core.problem_env import ProblemEnv

    class MathEnv(ProblemEnv):
        def get_question(self) -> str:
            return "What is 2 + 3?"

        def check_answer(self, response: str) -> float:
            return 1.0 if "5" in response else 0.0

    # ---- end of snippet ----
    return MathEnv


def test_problem_env_snippet_instantiates_and_rewards(renderer):
    from trl_envs import ProblemGroupBuilder

    MathEnv = snippet_math_env()
    env = MathEnv(renderer)  # no TypeError: check_format and get_reference_answer are optional
    assert env.check_format("anything at all") is True and env.get_reference_answer() is None

    # built in: ProblemGroupBuilder makes a group of ProblemEnv instances from a factory function
    group = ProblemGroupBuilder(lambda: MathEnv(renderer), num_envs=2)
    rewards = {
        text_close: run_rollout_batch([group], reply_with(renderer, *text_close)).groups[0].get_total_rewards()
        for text_close in [("5", True), ("7", True), ("5", False), ("7", False)]
    }
    assert rewards == {
        ("5", True): [1.0, 1.0],
        ("7", True): [0.0, 0.0],  # well formed: right / wrong
        ("5", False): [0.9, 0.9],
        ("7", False): [-0.1, -0.1],
    }  # cut by the budget: format penalty
    traj = run_rollout_batch([group], reply_with(renderer, "5")).groups[0].trajectories[0]
    assert traj.transitions[0].metrics == {"format": 1.0, "correct": 1.0}


@pytest.mark.parametrize("score, reward", [(True, 1.0), (False, 0.0), (0.5, 0.5), (1, 1.0)])
def test_check_answer_bool_or_partial_credit(renderer, score, reward):
    from trl_envs import ProblemGroupBuilder
    from trl_envs.core.problem_env import ProblemEnv

    class Partial(ProblemEnv):
        def get_question(self):
            return "Name two primes."

        def check_answer(self, response):
            return score

    group = ProblemGroupBuilder(lambda: Partial(renderer), num_envs=1)
    out = run_rollout_batch([group], reply_with(renderer, "2 3")).groups[0]
    assert out.get_total_rewards() == [pytest.approx(reward)]
    assert out.trajectories[0].transitions[0].metrics["correct"] == pytest.approx(reward)


@pytest.mark.parametrize("bad", [1.5, -0.1, "yes", float("nan")])
def test_check_answer_out_of_range_is_a_clear_error(renderer, bad):
    from trl_envs import ProblemGroupBuilder
    from trl_envs.core.problem_env import ProblemEnv

    class Broken(ProblemEnv):
        def get_question(self):
            return "?"

        def check_answer(self, response):
            return bad

    with pytest.raises(EnvContractError, match=r"Broken\.check_answer returned .* bool or a score in \[0, 1\]"):
        run_rollout_batch([ProblemGroupBuilder(lambda: Broken(renderer), num_envs=1)], reply_with(renderer, "x"))


# -- EnvGroupBuilder --------------------------------------------------------------------------------------------


def test_env_group_builder_snippet(renderer):
    MyEnv = snippet_env_with_question(renderer)
    # ---- snippet "EnvGroupBuilder" (ADAPTED IMPORT: trl_envs instead of tinker_cookbook.rl.types) ----
    from trl_envs import Env, EnvGroupBuilder

    class MyGroupBuilder(EnvGroupBuilder):
        async def make_envs(self) -> list[Env]:
            return [MyEnv(q) for q in self.questions]

        # Optional: compute group-level rewards (default: 0)
        async def compute_group_rewards(self, trajs, envs):
            return [(0.0, {}) for _ in trajs]

    # ---- end of snippet ----
    builder = MyGroupBuilder()
    builder.questions = ["What is 2 + 3?", "What is 1 + 4?", "What is 3 + 2?"]
    group = run_rollout_batch([builder], reply_with(renderer, "5")).groups[0]
    assert group.get_total_rewards() == [1.0, 1.0, 1.0]
    assert group.group_rewards == [0.0, 0.0, 0.0]
    assert [t.transitions[0].ob for t in group.trajectories] == [
        renderer.build_generation_prompt([{"role": "user", "content": q}]) for q in builder.questions
    ]


# -- RLDataset / RLDatasetBuilder -------------------------------------------------------------------------------


def test_rl_dataset_snippet(renderer):
    # ---- snippet "RLDataset / RLDatasetBuilder" (ADAPTED IMPORT: trl_envs instead of tinker_cookbook.rl.types) ----
    # ---- end of snippet ----
    from trl_envs import ProblemGroupBuilder, RLDataset, RLDatasetBuilder
    from trl_envs.rollout.event_loop import run_sync

    MathEnv = snippet_math_env()

    class MathDataset(RLDataset):  # a dataset in the overview's shape: get_batch(index), __len__
        def get_batch(self, index):
            return [ProblemGroupBuilder(lambda: MathEnv(renderer), num_envs=2) for _ in range(index + 1)]

        def __len__(self):
            return 3

    class MathDatasetBuilder(RLDatasetBuilder):
        async def __call__(self):
            return MathDataset(), None

    train, test = run_sync(MathDatasetBuilder())
    assert test is None and len(train) == 3 and len(train.get_batch(2)) == 3
    groups = run_rollout_batch(train.get_batch(1), reply_with(renderer, "5")).groups
    assert [g.get_total_rewards() for g in groups] == [[1.0, 1.0], [1.0, 1.0]]


# -- data processing --------------------------------------------------------------------------------------------


def test_data_processing_snippet(renderer):
    from trl_envs import ProblemGroupBuilder

    MathEnv = snippet_math_env()
    builders = [ProblemGroupBuilder(lambda: MathEnv(renderer), num_envs=2) for _ in range(2)]
    trajectory_groups = run_rollout_batch(builders, reply_with(renderer, "5")).groups
    trajectory_groups += run_rollout_batch(builders[:1], reply_with(renderer, "4")).groups
    # ---- snippet "数据处理" (ADAPTED IMPORT: trl_envs instead of tinker_cookbook.rl.data_processing) ----
    from trl_envs import assemble_training_data, compute_advantages, trajectory_to_data

    # Compute GRPO-style advantages
    advantages = compute_advantages(trajectory_groups, loss_fn="cispo")

    # Convert to Datum objects for forward_backward
    training_data = assemble_training_data(trajectory_groups, advantages)  # FILLED IN: "..." = optional arguments
    # ---- end of snippet ----
    assert len(advantages) == 3 and len(training_data) == 6
    first = trajectory_groups[0].trajectories[0]
    row = trajectory_to_data(first)
    assert row.prompt_ids == first.transitions[0].ob and row.completion_ids == first.transitions[0].ac.tokens
    assert [r.reward for r in training_data] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]


# -- rollout strategies -----------------------------------------------------------------------------------------


def test_rollout_strategies_fail_fast_and_retry(renderer):
    """The overview's table: FailFast stops at the first error; RetryOnFailure retries failed trajectories and
    carries on with partial success."""
    from trl_envs import EnvGroupBuilder, FailFast, RetryOnFailure

    MyEnv = snippet_env_with_question(renderer)
    made = []

    class Flaky(EnvGroupBuilder):
        async def make_envs(self):
            made.append(1)
            envs = [MyEnv("What is 2 + 3?") for _ in range(2)]
            if len(made) == 1:  # the first env of the first group breaks while stepping

                async def boom(action, *, extra=None):
                    raise ConnectionError("grader unreachable")

                envs[0].step = boom
            return envs

    with pytest.raises(ConnectionError, match="grader unreachable"):
        run_rollout_batch([Flaky()], reply_with(renderer, "5"), strategy=FailFast())
    made.clear()
    result = run_rollout_batch([Flaky()], reply_with(renderer, "5"), strategy=RetryOnFailure(max_retries=2))
    assert result.groups[0].get_total_rewards() == [1.0, 1.0]
    assert result.error_counts == {"ConnectionError": 1}
