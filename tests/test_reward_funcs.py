"""TRL's ``reward_funcs`` beside the env's reward: weighted, aggregated and logged as TRL does, on what the episode
was (text or messages of the model's turns, the trajectory), once per episode also when it trains one row per turn;
reward models by path; a bad function named in one line."""

from __future__ import annotations

import asyncio

import pytest
import torch

from trl_envs import EnvGRPOTrainer, make_env_dataset
from trl_envs.core.types import ListRLDataset
from trl_envs.errors.types import RunFailed
from trl_envs.trainers.reward_funcs import load_reward_func

pytestmark = pytest.mark.timeout(300)


def short_answer(completions, **kwargs):
    """A format reward: 1 for an answer of at most 3 characters."""
    return [1.0 if len(c.strip()) <= 3 else 0.0 for c in completions]


def _trainer(cpu_grpo_config, tiny_model_path, tokenizer, renderer, env="arithmetic", **kwargs):
    config_keys = {"reward_weights", "multi_objective_aggregation", "reward_completions", "scale_rewards"}
    config = cpu_grpo_config(**{k: v for k, v in kwargs.items() if k in config_keys})
    envs = make_env_dataset(env, renderer, group_size=4, batch_size=2, num_batches=4)
    rest = {k: v for k, v in kwargs.items() if k not in config_keys}
    return EnvGRPOTrainer(tiny_model_path, config, envs, processing_class=tokenizer, **rest)


def _batch(trainer):
    trainer.model.train()
    keys = trainer.train_dataset["prompt"][:2]
    return trainer.generation_batch(keys)


def _group_advantages(rewards: torch.Tensor, group_size: int = 4) -> torch.Tensor:
    grouped = rewards.view(-1, group_size)
    return ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).flatten()


def test_a_weighted_format_reward_changes_the_advantages_as_computed_by_hand(
    cpu_grpo_config, tiny_model_path, tokenizer, renderer
):
    seen = {}

    def record(completions, trajectory, env_reward, completion_ids, **kwargs):
        seen.update(completions=completions, trajectory=trajectory, env_reward=env_reward, ids=completion_ids)
        return short_answer(completions)

    record.__name__ = "short_answer"
    trainer = _trainer(
        cpu_grpo_config, tiny_model_path, tokenizer, renderer, reward_funcs=[record], reward_weights=[1.0, 0.5]
    )
    out = _batch(trainer)
    groups = trainer.last_rollout.groups
    env_totals = [t for g in groups for t in g.get_total_rewards()]
    answers = [
        tokenizer.decode(t.transitions[0].ac.tokens, skip_special_tokens=True) for g in groups for t in g.trajectories
    ]
    assert seen["completions"] == answers  # the model's answer text, special tokens removed
    assert seen["env_reward"] == pytest.approx(env_totals)
    assert [list(t.transitions[0].ac.tokens) for t in seen["trajectory"]] == seen["ids"]
    fmt = torch.tensor(short_answer(answers))
    expected = _group_advantages(torch.tensor(env_totals) + 0.5 * fmt)
    assert out["advantages"].tolist() == pytest.approx(expected.tolist(), abs=1e-4)
    logged = trainer.logged_completions()["rewards"]
    assert list(logged) == ["env", "short_answer"]  # logged by name, as TRL logs its reward functions
    assert logged["short_answer"][-8:] == pytest.approx(fmt.tolist())
    assert "rewards/short_answer/mean" in trainer.logged_metrics("train")


def test_async_reward_function_and_messages_of_each_model_turn(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    calls = []

    async def turns(completions, trajectory, **kwargs):
        await asyncio.sleep(0)
        calls.append(len(completions))
        for messages, t in zip(completions, trajectory):
            assert [m["role"] for m in messages] == ["assistant"] * len(t.transitions)
            assert [m["content"] for m in messages] == [
                tokenizer.decode(tr.ac.tokens, skip_special_tokens=True) for tr in t.transitions
            ]
        return [float(len(m)) for m in completions]

    trainer = _trainer(
        cpu_grpo_config,
        tiny_model_path,
        tokenizer,
        renderer,
        env="guess_number",
        reward_funcs=[turns],
        reward_completions="messages",
    )
    _batch(trainer)
    assert calls == [8]  # once per batch, one value per episode
    n_turns = [len(t.transitions) for g in trainer.last_rollout.groups for t in g.trajectories]
    assert trainer.logged_completions()["rewards"]["turns"][-8:] == pytest.approx(n_turns)


def test_episodes_trained_one_row_per_turn_are_scored_once(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    from test_per_turn import FreshBoardBuilder

    seen = []

    def episode_length(completions, trajectory, **kwargs):
        seen.append(len(trajectory))
        return [float(len(t.transitions)) for t in trajectory]

    dataset = ListRLDataset([FreshBoardBuilder(renderer, True) for _ in range(8)], batch_size=2)
    config = cpu_grpo_config(max_completion_length=6, reward_weights=[0.0, 1.0])
    trainer = EnvGRPOTrainer(
        tiny_model_path, config, dataset, processing_class=tokenizer, reward_funcs=[episode_length]
    )
    out = _batch(trainer)
    assert seen == [8]  # 2 groups x 4 episodes, not one call per row (24 rows)
    lengths = torch.tensor([float(n) for n in FreshBoardBuilder.TURNS] * 2)
    expected = _group_advantages(lengths)  # every row of an episode carries its episode's advantage
    adv = out["advantages"].view(2, 3, 4)
    for block in range(3):
        assert adv[:, block].flatten().tolist() == pytest.approx(expected.tolist(), abs=1e-4)


def test_a_reward_model_by_path_scores_each_episode(cpu_grpo_config, tiny_model_path, tokenizer, renderer, tmp_path):
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_model_path, num_labels=1)
    path = tmp_path / "tiny-rm"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    trainer = _trainer(cpu_grpo_config, tiny_model_path, tokenizer, renderer, reward_funcs=[str(path)])
    _batch(trainer)
    groups = trainer.last_rollout.groups
    scored = trainer.logged_completions()["rewards"]["tiny-rm"][-8:]
    model.config.pad_token_id = tokenizer.pad_token_id
    by_hand = []
    for t in (t for g in groups for t in g.trajectories):
        ids = tokenizer(tokenizer.decode(list(t.transitions[0].ob) + list(t.transitions[0].ac.tokens)))
        with torch.no_grad():
            by_hand.append(float(model(torch.tensor([ids["input_ids"]])).logits[0, 0]))
    assert scored == pytest.approx(by_hand, abs=1e-4)


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda completions, **kw: [0.0] * 3, "reward function 'bad' returned 3 rewards for 8 episodes"),
        (lambda completions, **kw: [float("nan")] * len(completions), "reward function 'bad' returned nan for"),
    ],
    ids=["wrong length", "nan"],
)
def test_a_bad_reward_function_is_named_in_one_line(
    bad, message, cpu_grpo_config, tiny_model_path, tokenizer, renderer
):
    bad.__name__ = "bad"
    trainer = _trainer(cpu_grpo_config, tiny_model_path, tokenizer, renderer, reward_funcs=[bad])
    with pytest.raises(RunFailed, match=message) as error:
        _batch(trainer)
    assert "\n" not in str(error.value)


def test_weights_must_count_the_env_reward(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    with pytest.raises(ValueError, match=r"Number of reward weights \(1\) must match number of reward functions \(2\)"):
        _trainer(
            cpu_grpo_config, tiny_model_path, tokenizer, renderer, reward_funcs=[short_answer], reward_weights=[1.0]
        )

    def env(completions, **kwargs):  # would shadow the env's reward in the logs
        return [0.0] * len(completions)

    with pytest.raises(ValueError, match=r"reward functions \['env'\] share a name"):
        _trainer(cpu_grpo_config, tiny_model_path, tokenizer, renderer, reward_funcs=[env])


def test_reward_functions_named_on_the_command_line(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text("def brevity(completions, **kw):\n    return [0.0] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    assert load_reward_func("my_rewards:brevity").__name__ == "brevity"
    assert load_reward_func("my_rewards.brevity").__name__ == "brevity"
    assert load_reward_func("think_format_reward").__name__ == "think_format_reward"
    (tmp_path / "rm").mkdir()
    assert load_reward_func("rm") == "rm" and load_reward_func("org/reward-model") == "org/reward-model"
    with pytest.raises(ValueError, match="--reward_funcs my_rewards:missing: module 'my_rewards' has no function"):
        load_reward_func("my_rewards:missing")
    with pytest.raises(ValueError, match="--reward_funcs nope:f: cannot import module 'nope'"):
        load_reward_func("nope:f")
    with pytest.raises(ValueError, match="--reward_funcs brevity: not a reward function or reward model"):
        load_reward_func("brevity")
