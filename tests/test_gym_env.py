"""The Gymnasium bridge: GymEnv plays exactly the underlying Gymnasium env, text in and out."""

import asyncio
import pickle

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from trl_envs import RolloutBudget, do_single_rollout, make_env_dataset, run_rollout_batch  # noqa: E402
from trl_envs.envs.cartpole import ACTION_NAMES, cartpole_text, lean_policy  # noqa: E402
from trl_envs.gym.env import GymDataset, GymEnv, GymGroupBuilder  # noqa: E402
from trl_envs.gym.evaluation import evaluate_gym, evaluate_policy  # noqa: E402
from trl_envs.gym.text import ActionParseError, ActionParser, ObservationFormatter, default_action  # noqa: E402
from trl_envs.samplers.text_policy import TextPolicySampler  # noqa: E402


def _reply(renderer, text: str, end: bool = True) -> list[int]:
    ids = renderer.tokenizer.encode(text, add_special_tokens=False)
    return ids + [renderer.end_of_turn_token_id] if end else ids


def _user_text(renderer, ob: list[int]) -> str:
    text = renderer.tokenizer.decode(ob, skip_special_tokens=False)
    return text.rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]


def _play(env: GymEnv, renderer, replies: list[str]):
    """Initial observation, then one StepResult per reply until the episode ends."""

    async def run():
        ob, _ = await env.initial_observation()
        results = []
        for text in replies:
            results.append(await env.step(_reply(renderer, text)))
            if results[-1].episode_done:
                break
        return ob, results

    return asyncio.run(run())


# -- step-for-step equality with the raw Gymnasium env ------------------------------------------------------------


def test_cartpole_matches_gymnasium_step_for_step(renderer):
    replies = ["1", "right", "0", " Left. ", "1", "1", "0", "RIGHT"] * 40
    actions = {"1": 1, "right": 1, "0": 0, " Left. ": 0, "RIGHT": 1}
    env = GymEnv("CartPole-v1", renderer, seed=7, action_names=["left", "right"])
    first_ob, results = _play(env, renderer, replies)

    raw = gym.make("CartPole-v1")
    obs, info = raw.reset(seed=7)
    formatter = ObservationFormatter(raw.observation_space, raw.action_space, action_names=["left", "right"])
    assert _user_text(renderer, first_ob) == formatter(obs, info)
    for i, result in enumerate(results):
        obs, reward, terminated, truncated, info = raw.step(actions[replies[i]])
        assert result.reward == pytest.approx(reward)
        assert result.episode_done == (terminated or truncated)
        assert result.metrics["parse_ok"] == 1.0
        if not result.episode_done:
            assert _user_text(renderer, result.next_observation) == formatter(obs, info)
    assert results[-1].episode_done and terminated  # this action sequence topples the pole
    assert results[-1].metrics["episode_length"] == len(results)
    assert results[-1].metrics["episode_return"] == pytest.approx(len(results))
    assert results[-1].metrics["terminated"] == 1.0 and results[-1].metrics["truncated"] == 0.0


def test_cartpole_default_text_shows_rounded_state_and_legal_actions(renderer):
    env = GymEnv("CartPole-v1", renderer, seed=0, action_names=["left", "right"], instructions="Balance it.")
    ob, _ = asyncio.run(env.initial_observation())
    obs, _ = gym.make("CartPole-v1").reset(seed=0)
    lines = _user_text(renderer, ob).split("\n")
    assert lines[0] == "Balance it."
    assert lines[1] == "Observation: " + ", ".join(f"{v:.2f}" for v in obs)
    assert lines[2] == "Actions: 0 = left, 1 = right"


def test_pendulum_box_actions_match_gymnasium_step_for_step(renderer):
    replies = ["0.5", "[1.25]", "-3", "2", "-0.75", "1e-1"]
    sent = [0.5, 1.25, -2.0, 2.0, -0.75, 0.1]  # -3 is clipped to the lower bound
    env = GymEnv("Pendulum-v1", renderer, seed=3, max_episode_steps=5)
    first_ob, results = _play(env, renderer, replies)

    raw = gym.make("Pendulum-v1", max_episode_steps=5)
    obs, info = raw.reset(seed=3)
    formatter = ObservationFormatter(raw.observation_space, raw.action_space)
    assert _user_text(renderer, first_ob) == formatter(obs, info)
    assert "Action: 1 number in [-2.00, 2.00]" in formatter(obs, info)
    assert len(results) == 5  # max_episode_steps truncates, as gymnasium.make(..., max_episode_steps=5)
    for result, value in zip(results, sent):
        obs, reward, terminated, truncated, info = raw.step(np.array([value], dtype=np.float32))
        assert result.reward == pytest.approx(float(reward), rel=1e-6)
        assert result.episode_done == (terminated or truncated)
        if not result.episode_done:
            assert _user_text(renderer, result.next_observation) == formatter(obs, info)
    assert truncated and results[-1].metrics["truncated"] == 1.0 and results[-1].metrics["terminated"] == 0.0
    assert results[-1].metrics["episode_return"] == pytest.approx(sum(r.reward for r in results))


def test_env_instance_and_factory_are_played_like_an_id(renderer):
    replies = ["1", "0", "0", "1"]
    by_id = [r.reward for r in _play(GymEnv("CartPole-v1", renderer, seed=1), renderer, replies)[1]]
    instance = gym.make("CartPole-v1")
    by_instance = GymEnv(instance, renderer, seed=1)
    assert [r.reward for r in _play(by_instance, renderer, replies)[1]] == by_id
    by_factory = GymEnv(lambda: gym.make("CartPole-v1"), renderer, seed=1)
    obs = [r.next_observation for r in _play(by_factory, renderer, replies)[1]]
    assert obs == [r.next_observation for r in _play(GymEnv("CartPole-v1", renderer, seed=1), renderer, replies)[1]]


# -- parsing -------------------------------------------------------------------------------------------------


def test_discrete_parser_reads_index_or_name_and_rejects_the_rest():
    parse = ActionParser(gym.spaces.Discrete(3, start=-1), action_names=["down", "stay", "up"])
    assert [parse(t) for t in ["-1", "0", "1", "Up", " stay.", "'down'"]] == [-1, 0, 1, 1, 0, -1]
    for bad, why in [("2", "outside"), ("push up", "cannot read"), ("", "empty"), ("1.5", "cannot read")]:
        with pytest.raises(ActionParseError, match=why):
            parse(bad)
    with pytest.raises(ValueError, match="not numbers"):
        ActionParser(gym.spaces.Discrete(2), action_names=["0", "1"])
    with pytest.raises(ValueError, match="3 action_names"):
        ActionParser(gym.spaces.Discrete(2), action_names=["a", "b", "c"])


def test_box_parser_reads_numbers_clips_and_checks_shape():
    space = gym.spaces.Box(low=np.array([-1.0, 0.0], np.float32), high=np.array([1.0, 5.0], np.float32))
    parse = ActionParser(space)
    np.testing.assert_allclose(parse("0.5, 2"), [0.5, 2.0])
    np.testing.assert_allclose(parse("[-7 9.5]"), [-1.0, 5.0])  # clipped into the bounds
    assert parse("0 1").dtype == np.float32 and space.contains(parse("0 1"))
    for bad, why in [
        ("0.5", "got 1 numbers"),
        ("1 2 3", "got 3 numbers"),
        ("left", "cannot read"),
        ("0.5 nan", "cannot read"),
        ("move 0.5 1", "cannot read"),
    ]:
        with pytest.raises(ActionParseError, match=why):
            parse(bad)
    strict = ActionParser(space, clip=False)
    with pytest.raises(ActionParseError, match="outside the bounds"):
        strict("2 2")
    with pytest.raises(TypeError, match="no default parser"):
        ActionParser(gym.spaces.Dict({"a": gym.spaces.Discrete(2)}))


def test_multidiscrete_parser_and_defaults():
    parse = ActionParser(gym.spaces.MultiDiscrete([3, 2]))
    np.testing.assert_array_equal(parse("2 1"), [2, 1])
    with pytest.raises(ActionParseError, match="outside"):
        parse("3 0")
    with pytest.raises(ActionParseError, match="integers"):
        parse("1.5 0")
    assert default_action(gym.spaces.Discrete(4, start=2)) == 2
    np.testing.assert_array_equal(default_action(gym.spaces.Box(1.0, 3.0, (2,))), [1.0, 1.0])


def test_formatter_refuses_images_and_names_its_env(renderer):
    with pytest.raises(TypeError, match=r"GymEnv\(CarRacing-like\).*too many to show"):
        GymEnv(_ImageEnv, renderer)
    with pytest.raises(ValueError, match=r"GymEnv\(CartPole-v1\): .*3 observation_names"):
        GymEnv("CartPole-v1", renderer, observation_names=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"GymEnv\(CartPole-v1\): mode must be"):
        GymEnv("CartPole-v1", renderer, mode="history")


class _ImageEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 255, (8, 8, 3), dtype=np.uint8)
    action_space = gym.spaces.Discrete(2)
    spec = gym.envs.registration.EnvSpec("CarRacing-like")


# -- unparsable replies --------------------------------------------------------------------------------------


def test_unparsable_reply_costs_penalty_and_plays_the_default_action(renderer):
    env = GymEnv("CartPole-v1", renderer, seed=5, invalid_action_penalty=-0.5, default_action=1)
    _, results = _play(env, renderer, ["jump", "0"])
    raw = gym.make("CartPole-v1")
    raw.reset(seed=5)
    obs, reward, *_ = raw.step(1)  # the default action was played in place of "jump"
    assert results[0].reward == pytest.approx(reward - 0.5)
    assert results[0].metrics["parse_ok"] == 0.0 and "cannot read" in results[0].logs["invalid_action"]
    assert not results[0].episode_done
    assert _user_text(renderer, results[0].next_observation).startswith(
        f"Observation: {obs[0]:.2f}".replace("-0.00", "0.00")
    )
    assert results[1].metrics["parse_ok"] == 1.0 and results[1].reward == 1.0


def test_unparsable_reply_can_end_the_episode(renderer):
    env = GymEnv("CartPole-v1", renderer, seed=5, invalid_action="end", invalid_action_penalty=-2.0)
    _, results = _play(env, renderer, ["1", "I think left", "0"])
    assert len(results) == 2 and results[1].episode_done
    assert results[1].reward == -2.0
    assert results[1].metrics == {
        "parse_ok": 0.0,
        "episode_return": 1.0,
        "episode_length": 1.0,
        "terminated": 0.0,
        "truncated": 0.0,
        "invalid_actions": 1.0,
    }
    with pytest.raises(RuntimeError, match="after the episode ended"):
        asyncio.run(env.step(_reply(renderer, "1")))


def test_reply_cut_by_the_token_budget_is_invalid(renderer):
    env = GymEnv("CartPole-v1", renderer, seed=0, invalid_action_penalty=-1.0)

    async def run():
        await env.initial_observation()
        return await env.step(_reply(renderer, "1", end=False))

    result = asyncio.run(run())
    assert result.metrics["parse_ok"] == 0.0 and "cut off" in result.logs["invalid_action"]
    assert result.reward == 0.0  # +1 from CartPole, -1 penalty


def test_random_default_action_is_reproducible_from_the_seed(renderer):
    def rewards(seed):
        env = GymEnv("CartPole-v1", renderer, seed=seed, default_action="random")
        return [r.next_observation for r in _play(env, renderer, ["?"] * 30)[1]]

    assert rewards(11) == rewards(11)
    assert rewards(11) != rewards(12)


# -- seeds, modes, rollouts ----------------------------------------------------------------------------------


def test_same_seed_same_episode_different_seed_different_start(renderer):
    def first(seed):
        return asyncio.run(GymEnv("CartPole-v1", renderer, seed=seed).initial_observation())[0]

    assert first(4) == first(4)
    assert first(4) != first(5)


def test_current_state_mode_shows_only_the_current_state(renderer):
    env = GymEnv("CartPole-v1", renderer, seed=2)
    assert env.observations_extend is False
    ob, results = _play(env, renderer, ["1", "0", "1"])
    im_start = renderer.tokenizer.convert_tokens_to_ids("<|im_start|>")
    for r in results:
        assert r.next_observation[: len(ob) + 2] != ob + _reply(renderer, "1")  # no history carried over
        assert r.next_observation.count(im_start) == 2  # one user turn, then the generation prompt
        ob = r.next_observation
    traj = asyncio.run(
        do_single_rollout(_policy(renderer, "1"), GymEnv("CartPole-v1", renderer, seed=2), RolloutBudget(max_turns=3))
    )
    assert traj.observations_extend is False and traj.stop_reason == "max_turns"


def test_full_history_mode_extends_token_exactly_and_stops_at_the_context_limit(renderer):
    env = GymEnv("CartPole-v1", renderer, seed=2, mode="full_history", max_context_tokens=300)
    assert env.observations_extend is True
    replies = ["1", "oops", "0", "1", "0", "1"]
    ob, results = _play(env, renderer, replies)
    context = ob
    for text, r in zip(replies, results):
        action = _reply(renderer, text)
        assert r.next_observation[: len(context) + len(action)] == context + action
        context = r.next_observation
    assert "Invalid action" in renderer.tokenizer.decode(results[1].next_observation)
    last = results[-1]
    assert last.episode_done and last.metrics["context_full"] == 1.0 and last.metrics["truncated"] == 1.0
    assert len(results) < len(replies)
    assert all(len(r.next_observation) <= 300 for r in results[:-1])


def _policy(renderer, reply):
    async def policy(prompt, stop, max_tokens):
        from trl_envs import TokensWithLogprobs

        return TokensWithLogprobs(_reply(renderer, reply))

    return policy


# -- groups, datasets, the built-in ----------------------------------------------------------------------------


def test_group_shares_a_seed_and_dataset_seeds_differ(renderer):
    dataset = GymDataset("CartPole-v1", renderer, batch_size=3, group_size=2, num_batches=2, seed=100)
    seeds = [b.seed for i in range(2) for b in dataset.get_batch(i)]
    assert seeds == [100, 101, 102, 103, 104, 105]
    builder = dataset.get_batch(1)[0]
    envs = asyncio.run(builder.make_envs())
    assert [e.seed for e in envs] == [103, 103]
    assert asyncio.run(envs[0].initial_observation()) == asyncio.run(envs[1].initial_observation())
    asyncio.run(builder.cleanup())
    assert pickle.loads(pickle.dumps(builder)).seed == 103
    with pytest.raises(TypeError, match="Gymnasium id or a factory"):
        GymGroupBuilder(gym.make("CartPole-v1"), renderer, 0, 2)


def test_builtin_cartpole_dataset(renderer):
    train, test = asyncio.run(make_env_dataset("cartpole", renderer, group_size=2, batch_size=2, num_batches=3)())
    assert len(train) == 3 and len(test) == 1
    assert {b.seed for b in test.get_batch(0)}.isdisjoint({b.seed for i in range(3) for b in train.get_batch(i)})
    builder = train.get_batch(0)[0]
    assert builder.logging_tags() == ["cartpole"]
    result = run_rollout_batch([builder], TextPolicySampler(renderer, lean_policy), RolloutBudget(max_turns=50))
    group = result.groups[0]
    assert [len(t.transitions) for t in group.trajectories] == [50, 50]  # the scripted policy keeps the pole up
    assert all(not t.observations_extend for t in group.trajectories)
    assert result.num_sampler_calls == 50  # both episodes sampled together each turn


def test_cartpole_text_and_lean_policy():
    text = cartpole_text(np.array([0.011, -0.2, 0.031, -0.0449]))
    assert text.endswith("pole angle +0.03 (right), pole turning -0.04 (left), cart +0.01, cart speed -0.20")
    assert lean_policy(text) == "0"
    assert lean_policy(cartpole_text(np.array([0.0, 0.0, -0.01, 0.03]))) == "1"
    assert "(upright)" in cartpole_text(np.array([0.0, 0.0, -0.001, 0.004]))


# -- evaluation ------------------------------------------------------------------------------------------------


def _direct_returns(seeds, max_steps=None):
    """The lean policy played on the raw env, reading the same rounded text the model would see."""
    returns, lengths = [], []
    for seed in seeds:
        raw = gym.make("CartPole-v1", max_episode_steps=max_steps) if max_steps else gym.make("CartPole-v1")
        obs, _ = raw.reset(seed=seed)
        total, steps = 0.0, 0
        while True:
            obs, reward, terminated, truncated, _ = raw.step(int(lean_policy(cartpole_text(obs))))
            total, steps = total + reward, steps + 1
            if terminated or truncated:
                break
        returns.append(total)
        lengths.append(steps)
    return returns, lengths


def test_evaluate_policy_matches_a_direct_computation(renderer):
    sampler = TextPolicySampler(renderer, lean_policy)
    kwargs = dict(formatter=cartpole_text, action_names=ACTION_NAMES, max_episode_steps=120)
    returns, lengths = _direct_returns(range(10, 14), max_steps=120)
    mean, std = evaluate_policy(sampler, "CartPole-v1", renderer, 4, seed=10, **kwargs)
    assert mean == pytest.approx(np.mean(returns)) and std == pytest.approx(np.std(returns))
    rewards, lens = evaluate_policy(sampler, "CartPole-v1", renderer, 4, seed=10, return_episode_rewards=True, **kwargs)
    assert rewards == returns and lens == lengths
    full = evaluate_gym(sampler, "CartPole-v1", renderer, 4, seed=10, **kwargs)
    assert full.env_steps == sum(lengths) and full.parse_ok == 1.0


def test_evaluation_return_excludes_penalties(renderer):
    result = evaluate_gym(
        TextPolicySampler(renderer, lambda prompt: "maybe"),
        "CartPole-v1",
        renderer,
        2,
        seed=0,
        default_action=0,
        invalid_action_penalty=-1.0,
    )
    assert result.parse_ok == 0.0
    assert result.episode_rewards == [float(n) for n in result.episode_lengths]  # +1 per step, penalties left out
    assert result.eval.mean_reward == pytest.approx(0.0)  # trl_envs' total: +1 - 1 per step


def test_tiny_model_plays_cartpole_without_crashing(tiny_model_path, tokenizer, renderer):
    import torch
    from transformers import AutoModelForCausalLM

    from trl_envs import HFSampler

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    result = evaluate_gym(
        HFSampler(model, tokenizer, temperature=1.0),
        "CartPole-v1",
        renderer,
        4,
        seed=0,
        formatter=cartpole_text,
        action_names=ACTION_NAMES,
        max_episode_steps=15,
        max_tokens_per_turn=4,
    )
    assert len(result.episode_rewards) == 4 and all(1 <= n <= 15 for n in result.episode_lengths)
    assert 0.0 <= result.parse_ok <= 1.0


# -- training --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode,per_turn", [("current_state", 1.0), ("full_history", 0.0)])
def test_grpo_trains_on_cartpole_with_per_turn_credit(
    mode, per_turn, cpu_grpo_config, tiny_model_path, tokenizer, renderer
):
    from trl_envs import EnvGRPOTrainer

    builder = make_env_dataset(
        "cartpole",
        renderer,
        group_size=4,
        batch_size=1,
        num_batches=2,
        num_test_batches=0,
        max_episode_steps=5,
        mode=mode,
    )
    config = cpu_grpo_config(
        per_device_train_batch_size=4,
        max_steps=2,
        max_completion_length=4,
        max_turns=500,
        training_rows="auto",
        credit_assignment="per_turn",
        credit_gamma=0.95,
    )
    trainer = EnvGRPOTrainer(tiny_model_path, config, builder, processing_class=tokenizer)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "env/cartpole/episode_return" in h]
    assert len(logged) == 2
    for h in logged:
        assert h["rows/per_turn_fraction"] == per_turn  # current state: a row per turn; full history: per episode
        assert 1.0 <= h["env/cartpole/episode_length"] <= 5.0
        assert h["env/cartpole/episode_return"] == pytest.approx(h["env/cartpole/episode_length"])


def test_cartpole_row_spec_makes_a_seeded_group(renderer):
    from trl_envs import EnvRowError, make_env_group_builder

    builder = make_env_group_builder({"env": "cartpole", "seed": 3, "max_episode_steps": 7}, renderer, 2)
    assert isinstance(builder, GymGroupBuilder) and builder.seed == 3
    result = run_rollout_batch([builder], TextPolicySampler(renderer, lambda prompt: "1"))
    for trajectory in result.groups[0].trajectories:  # always pushing right topples the pole only after step 7
        assert len(trajectory.transitions) == 7 and trajectory.transitions[-1].metrics["truncated"] == 1.0
    with pytest.raises(EnvRowError, match="seed"):
        make_env_group_builder({"env": "cartpole"}, renderer, 2)
