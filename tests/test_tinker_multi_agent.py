"""tinker-cookbook's multi-agent envs, unchanged: the two-player TextArena game runs without valve stalls and ends
together when a player is stopped by a budget, and envs that call a ``SamplerMessageCompleter`` in the same turn
share one sampler call (offline, on the tiny model's tokenizer; scripted players stand in for the model except in
the training step)."""

from __future__ import annotations

import random
import re
import time

import pytest

pytest.importorskip("tinker_cookbook")
pytest.importorskip("textarena")

from tinker_cookbook.recipes.multiplayer_rl.text_arena.env import (  # noqa: E402
    TwoPlayerEnvGroupBuilder,
    TwoPlayerTextArenaDatasetBuilder,
)
from tinker_cookbook.recipes.multiplayer_rl.twenty_questions.env import TwentyQuestionsDataset  # noqa: E402
from tinker_cookbook.renderers import get_renderer  # noqa: E402
from tinker_cookbook.tokenizer_utils import get_tokenizer  # noqa: E402
from tinker_cookbook_envs import RENDERER_NAME, SECRET_WORDS  # noqa: E402

from trl_envs import RolloutBudget, run_rollout_batch  # noqa: E402
from trl_envs.samplers.text_policy import TextPolicySampler  # noqa: E402
from trl_envs.tinker import SamplerMessageCompleter, adapt  # noqa: E402

pytestmark = pytest.mark.timeout(120)


class Recording(TextPolicySampler):
    """A scripted sampler that records the size of each call."""

    def __init__(self, renderer, policy):
        super().__init__(renderer, policy)
        self.batch_sizes: list[int] = []

    def sample(self, requests):
        self.batch_sizes.append(len(requests))
        return super().sample(requests)


def legal_mover(seed: int = 0):
    """Plays a random legal TextArena tic-tac-toe move (``[k]``), read from the prompt's available moves."""
    rng = random.Random(seed)

    def move(text: str) -> str:
        moves = re.findall(r"'(\[\d+\])'", text.rsplit("<|im_start|>user", 1)[-1])
        return rng.choice(moves) if moves else "[4]"

    return move


@pytest.fixture
def cookbook_renderer(tiny_model_path):
    return get_renderer(RENDERER_NAME, get_tokenizer(tiny_model_path))


def self_play_games(cookbook_renderer, n):
    return [
        adapt(
            TwoPlayerEnvGroupBuilder(game_name="TicTacToe-v0", renderer=cookbook_renderer, num_envs=2, self_play=True)
        )
        for _ in range(n)
    ]


def test_text_arena_self_play_runs_without_valve_stalls(cookbook_renderer, renderer):
    """The second player waits on the cookbook's asyncio.Condition; nothing in the env tells us so."""
    start = time.perf_counter()
    result = run_rollout_batch(
        self_play_games(cookbook_renderer, 4),
        Recording(renderer, legal_mover()),
        RolloutBudget(max_turns=9, max_tokens_per_turn=8),
        max_wait_s=60,
    )
    assert time.perf_counter() - start < 20  # a valve flush alone would take 60 s
    assert result.num_valve_flushes == 0 and result.num_idle_flushes >= 1
    assert 5 <= result.num_sampler_calls <= 9  # the games move together: one call per move number
    assert all(t.stop_reason == "done" for g in result.groups for t in g.trajectories)


def test_text_arena_player_stopped_by_a_budget_does_not_leave_the_other_waiting(cookbook_renderer, renderer):
    start = time.perf_counter()
    result = run_rollout_batch(
        self_play_games(cookbook_renderer, 2),
        Recording(renderer, legal_mover()),
        RolloutBudget(max_turns=1, max_tokens_per_turn=8),
        max_wait_s=60,
    )
    assert time.perf_counter() - start < 20
    for group in result.groups:
        assert [t.stop_reason for t in group.trajectories] == ["max_turns", "sibling_ended"]
        assert "TwoPlayerEnv" in group.trajectories[1].transitions[-1].logs["ended"]
    assert result.error_counts == {"SiblingEnded": 2}


def test_completer_requests_of_a_turn_share_one_sampler_call(tiny_model_path, renderer):
    """8 twenty-questions envs each ask the answerer (a SamplerMessageCompleter over a frozen model: here a
    scripted one) once per turn: one answerer call per turn, as many requests as envs still playing."""
    answerer = Recording(renderer, lambda text: "no")
    completer = SamplerMessageCompleter(
        answerer, get_renderer(RENDERER_NAME, get_tokenizer(tiny_model_path)), max_tokens=5
    )
    dataset = TwentyQuestionsDataset(
        answerer=completer,
        answers=SECRET_WORDS,
        batch_size=2,
        group_size=4,
        renderer=get_renderer(RENDERER_NAME, get_tokenizer(tiny_model_path)),
    )
    player = Recording(renderer, lambda text: "Is it alive?")
    result = run_rollout_batch(adapt(dataset).get_batch(0), player, RolloutBudget(max_turns=3, max_tokens_per_turn=8))
    assert player.batch_sizes == [8, 8, 8]
    assert answerer.batch_sizes == [8, 8, 8]  # one call per turn, not one per env
    assert result.num_sampler_calls == 6


def test_a_completer_without_sampler_samples_the_policy_in_its_batch(cookbook_renderer, renderer):
    """Against an opponent that is the policy being trained (``sampler=None``): the opponent's requests go to the
    policy's sampler, batched with the players' turns."""
    policy = Recording(renderer, legal_mover(1))
    opponent = SamplerMessageCompleter(None, cookbook_renderer, max_tokens=8, stop_condition=["]\n"])
    builders = [
        adapt(
            TwoPlayerEnvGroupBuilder(
                game_name="TicTacToe-v0",
                renderer=cookbook_renderer,
                num_envs=2,
                self_play=False,
                opponent_policy=opponent,
            )
        )
        for _ in range(2)
    ]
    result = run_rollout_batch(builders, policy, RolloutBudget(max_turns=9, max_tokens_per_turn=8), max_wait_s=60)
    assert result.num_valve_flushes == 0
    assert max(policy.batch_sizes) == 4  # the 4 players' turns, then the opponents' replies to those that wait
    assert len(policy.batch_sizes) == result.num_sampler_calls
    with pytest.raises(RuntimeError, match="can only be called inside a rollout"):
        import asyncio

        asyncio.run(opponent([{"role": "user", "content": "hi"}]))


def test_grpo_step_on_cookbook_text_arena_self_play_is_not_stalled(tiny_model_path, tokenizer, cpu_grpo_config):
    """The cookbook's own dataset builder, unchanged, on the tiny model: a step took ~30 s of valve waits before;
    now no flush is forced. The model's context budget (1024 positions) stops long games, and the player left
    waiting is ended with it."""
    envs = adapt(
        TwoPlayerTextArenaDatasetBuilder(
            batch_size=4,
            num_train_datapoints=8,
            num_test_datapoints=2,
            model_name=tiny_model_path,
            game_name="TicTacToe-v0",
            renderer_name=RENDERER_NAME,
            test_opponent="random",
        )
    )
    from trl_envs import EnvGRPOTrainer

    config = cpu_grpo_config(
        num_generations=2,
        per_device_train_batch_size=4,
        max_steps=1,
        max_turns=9,
        max_completion_length=8,
        sampler_max_wait_s=60,
    )
    trainer = EnvGRPOTrainer(tiny_model_path, config, envs, processing_class=tokenizer)
    start = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - start
    assert trainer.last_rollout.num_valve_flushes == 0, vars(trainer.last_rollout)
    assert elapsed < 45


def test_training_on_text_arena_with_a_player_stopped_by_max_turns_does_not_hang(
    tiny_model_path, tokenizer, renderer, cpu_grpo_config
):
    """Legal moves (a scripted player) and max_turns=1: each game's second player is left waiting on the cookbook's
    Condition after the first stops. The step completes and the training logs count the ended players."""
    envs = adapt(
        TwoPlayerTextArenaDatasetBuilder(
            batch_size=4,
            num_train_datapoints=8,
            num_test_datapoints=2,
            model_name=tiny_model_path,
            game_name="TicTacToe-v0",
            renderer_name=RENDERER_NAME,
            test_opponent="random",
        )
    )
    from trl_envs import EnvGRPOTrainer

    config = cpu_grpo_config(
        num_generations=2, per_device_train_batch_size=4, max_steps=1, max_turns=1, max_completion_length=8
    )
    trainer = EnvGRPOTrainer(
        tiny_model_path, config, envs, processing_class=tokenizer, sampler=Recording(renderer, legal_mover(2))
    )
    trainer.train()
    assert trainer.last_rollout.num_sibling_endings == 2
    logged = [h for h in trainer.state.log_history if any("SiblingEnded" in k for k in h)]
    assert logged, sorted(trainer.state.log_history[0])
