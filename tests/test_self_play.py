"""Self-play tic-tac-toe: two envs of a group play one game. Zero-sum rewards, both players trained, no sampler
stalls while players wait on each other, and no player left waiting when the other fails. Scripted text policies
stand in for the model; one short EnvGRPOTrainer run uses the tiny model."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from text_policies import free_cells

from trl_envs import (
    FailFast,
    RetryOnFailure,
    RolloutBudget,
    run_rollout_batch,
    run_rollout_batch_async,
    trajectory_to_data,
)
from trl_envs.envs.tic_tac_toe import (
    OpponentAbandoned,
    OpponentTimeout,
    PerfectOpponent,
    TicTacToeDatasetBuilder,
    TicTacToeMatch,
    TicTacToeSelfPlayGroupBuilder,
    TicTacToeVsOpponentGroupBuilder,
)
from trl_envs.envs.tic_tac_toe.rules import EMPTY_BOARD, parse_move, place, show, winner
from trl_envs.rollout.batching import BatchingPolicy, parked
from trl_envs.rollout.event_loop import run_sync
from trl_envs.samplers.text_policy import TextPolicySampler

pytestmark = pytest.mark.timeout(300)
BUDGET = RolloutBudget(max_turns=9, max_tokens_per_turn=8)


def random_player(seed=0, illegal_rate=0.0):
    rng = random.Random(seed)

    def respond(text):
        if rng.random() < illegal_rate:
            return "banana"
        return str(rng.choice(free_cells(text) or [1]))  # no board shown: the opponent forfeited at once

    return respond


# -- rules -----------------------------------------------------------------------------------------------------


def test_rules_winner_and_move_parsing():
    b = EMPTY_BOARD
    for cell, mark in [(1, "X"), (4, "O"), (2, "X"), (5, "O")]:
        b = place(b, cell, mark)
    assert winner(b) is None and show(b) == "X|X|3\nO|O|6\n7|8|9"
    assert winner(place(b, 3, "X")) == "X"
    draw = tuple("XOXXOOOXX")
    assert winner(draw) == "draw"
    assert [parse_move(t) for t in ["5", " 7.", "0", "10", "five", ""]] == [5, 7, None, None, None, None]
    with pytest.raises(ValueError, match="not free"):
        place(b, 1, "O")


# -- self-play groups --------------------------------------------------------------------------------------------


def test_self_play_rewards_are_zero_sum_and_both_players_are_trained(tokenizer, renderer):
    builders = [TicTacToeSelfPlayGroupBuilder(renderer, num_games=4) for _ in range(2)]
    result = run_rollout_batch(builders, TextPolicySampler(renderer, random_player(1, illegal_rate=0.1)), BUDGET)
    outcomes = set()
    for group in result.groups:
        assert len(group.trajectories) == 8
        for k in range(4):
            x, o = group.group_rewards[2 * k], group.group_rewards[2 * k + 1]
            assert x + o == 0 and x in (-1.0, 0.0, 1.0)  # zero-sum per game
            outcomes.add(x)
        for i, traj in enumerate(group.trajectories):
            row = trajectory_to_data(traj, env_name=f"player {i}")  # observations extend token-exactly
            assert sum(row.mask) == traj.num_action_tokens > 0  # each player's own moves are trained, nothing else
            assert traj.stop_reason == "done"
            final = traj.transitions[-1].metrics
            assert final["win"] + final["draw"] + final["loss"] == 1.0
            if final["illegal"]:  # the penalty is a step reward on top of losing the game
                assert traj.step_reward == -0.5 and group.group_rewards[i] == -1.0
    assert len(outcomes) > 1  # the random players did not all end alike
    assert result.num_valve_flushes == 0


def test_players_see_each_others_moves_in_one_growing_conversation(tokenizer, renderer):
    moves = iter(["5", "1", "9", "3", "2", "8", "4", "6", "7"])  # X: 5 9 2 4 7, O: 1 3 8 6 -> draw
    result = run_rollout_batch(
        [TicTacToeSelfPlayGroupBuilder(renderer, 1)], TextPolicySampler(renderer, lambda text: next(moves)), BUDGET
    )
    x, o = result.groups[0].trajectories
    assert len(x.transitions) == 5 and len(o.transitions) == 4
    assert result.groups[0].group_rewards == [0.0, 0.0]
    o_text = tokenizer.decode(o.final_ob)
    assert "You are O" in o_text and "X played 5." in o_text and "X played 7." not in o_text
    x_text = tokenizer.decode(x.final_ob)
    assert "O played 6." in x_text and x_text.count("You are X") == 1
    assert result.num_sampler_calls == 9  # one call per move: the waiting player never holds the batch up


def test_turn_taking_never_waits_for_the_valve(tokenizer, renderer):
    """With the valve at 2 s, a stall per move would make 4 games of up to 9 moves take many seconds."""
    builders = [TicTacToeSelfPlayGroupBuilder(renderer, num_games=2) for _ in range(2)]

    async def go():
        return await asyncio.wait_for(
            run_rollout_batch_async(builders, TextPolicySampler(renderer, random_player(2)), BUDGET, max_wait_s=2.0),
            timeout=60,
        )

    start = time.perf_counter()
    result = run_sync(go)
    assert result.num_valve_flushes == 0
    assert time.perf_counter() - start < 10
    assert 5 <= result.num_sampler_calls <= 9  # all games move together: one call per move number


def test_an_unparked_wait_on_a_sibling_needs_no_valve_but_a_thread_at_work_is_waited_for():
    """A wait on a sibling without parked() is seen from the quiet loop (an idle flush, no valve); a sibling whose
    work runs in a thread is waited for until the valve (control: the valve counter does count stalls)."""

    class Sampler:
        def sample(self, requests):
            from trl_envs import TokensWithLogprobs

            return [TokensWithLogprobs([1, 2]) for _ in requests]

    async def go(how):
        batcher = BatchingPolicy(Sampler(), max_wait_s=1.5)  # a valve no busy machine reaches by chance
        moved = asyncio.Event()

        async def first():
            async with batcher.episode():
                await batcher.sample([1], [2], 4)
                moved.set()

        async def second():
            async with batcher.episode():
                if how == "parked":
                    async with parked():
                        await moved.wait()
                elif how == "plain":
                    await moved.wait()
                else:  # busy in a worker thread, longer than the valve
                    await asyncio.to_thread(time.sleep, 2.0)
                await batcher.sample([1], [2], 4)

        await asyncio.wait_for(asyncio.gather(second(), first()), 10)  # second is live before first samples
        return batcher.num_valve_flushes, batcher.num_idle_flushes

    assert run_sync(lambda: go("plain")) == (0, 1)
    assert run_sync(lambda: go("parked")) == (0, 0)
    assert run_sync(lambda: go("thread")) == (1, 0)


# -- failures never leave a player waiting ------------------------------------------------------------------------


def test_waiting_on_a_player_that_never_moves_times_out():
    async def go():
        match = TicTacToeMatch(move_timeout=0.2)
        with pytest.raises(OpponentTimeout, match="did not move within 0.2s"):
            await asyncio.wait_for(match.wait_for_turn("O"), 5)

    run_sync(go)


def test_a_cancelled_player_abandons_the_match_and_wakes_the_other():
    async def go():
        match = TicTacToeMatch(move_timeout=30)
        match.play("X", 5)
        x_waits = asyncio.ensure_future(match.wait_for_turn("X"))
        o_waits_for_nothing = asyncio.ensure_future(TicTacToeMatch(30).wait_for_turn("O"))  # another game
        await asyncio.sleep(0.01)
        o_waits_for_nothing.cancel()
        # O of the first game fails mid-game: its env marks the match abandoned
        match.abandon("O")
        start = time.perf_counter()
        with pytest.raises(OpponentAbandoned, match="player O stopped mid-game"):
            await asyncio.wait_for(x_waits, 30)
        assert time.perf_counter() - start < 15  # woken by the abandon, not by the 30 s move timeout

    run_sync(go)


def test_a_failing_player_fails_the_group_fast_under_fail_fast(tokenizer, renderer):
    calls = {"n": 0}
    inner = random_player(3)

    def respond(text):
        calls["n"] += 1
        if "You are O" in text and text.count("X played") >= 2:  # O's second move: the sampler blows up for that row
            raise RuntimeError("sampler died on O")
        return inner(text)

    async def go():
        return await asyncio.wait_for(
            run_rollout_batch_async(
                [TicTacToeSelfPlayGroupBuilder(renderer, 1, move_timeout=30)],
                TextPolicySampler(renderer, respond),
                BUDGET,
                FailFast(),
            ),
            timeout=20,
        )

    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="sampler died on O"):
        run_sync(go)
    assert time.perf_counter() - start < 10  # not the 30 s move timeout


def test_retry_replays_the_whole_game_when_one_player_fails(tokenizer, renderer):
    failed = {"done": False}
    inner = random_player(4)

    class FlakyO(TicTacToeSelfPlayGroupBuilder):
        async def make_envs(self):
            envs = await super().make_envs()
            if not failed["done"]:
                failed["done"] = True
                o = envs[3].message_env  # game 1's O fails on its first move

                async def broken(response):
                    raise ConnectionError("grader unreachable")

                o.step = broken
            return envs

    async def go():
        return await asyncio.wait_for(
            run_rollout_batch_async(
                [FlakyO(renderer, 2, move_timeout=30)],
                TextPolicySampler(renderer, inner),
                BUDGET,
                RetryOnFailure(max_retries=1),
            ),
            timeout=20,
        )

    result = run_sync(go)
    group = result.groups[0]
    assert group is not None and result.error_counts == {"ConnectionError": 1}
    assert group.group_rewards[2] + group.group_rewards[3] == 0  # game 1 was replayed by both players
    assert all(t.stop_reason == "done" for t in group.trajectories)
    assert result.num_valve_flushes == 0


# -- evaluation against scripted opponents -----------------------------------------------------------------------


def test_perfect_opponent_never_loses_and_random_play_wins_sometimes_against_random(tokenizer, renderer):
    def play(opponent):
        builders = [
            TicTacToeVsOpponentGroupBuilder(renderer, 8, opponent, mark, seed=10 * i)
            for i, mark in enumerate(["X", "O", "X", "O"])
        ]
        result = run_rollout_batch(builders, TextPolicySampler(renderer, random_player(5)), BUDGET)
        finals = [t.transitions[-1].metrics for g in result.groups for t in g.trajectories]
        return {k: sum(f[k] for f in finals) for k in ("win", "draw", "loss")}, result

    vs_perfect, _ = play("perfect")
    assert vs_perfect["win"] == 0 and vs_perfect["loss"] > 20
    vs_random, result = play("random")
    assert vs_random["win"] > 5 and vs_random["loss"] > 0
    totals = [r for g in result.groups for r in g.get_total_rewards()]
    assert set(totals) <= {-1.0, 0.0, 1.0}


def test_perfect_opponent_blocks_and_wins():
    rng = random.Random(0)
    b = EMPTY_BOARD
    for cell, mark in [(1, "X"), (5, "O"), (2, "X")]:
        b = place(b, cell, mark)
    assert PerfectOpponent().choose(b, "O", rng) == 3  # must block
    b = place(place(b, 3, "O"), 9, "X")
    assert PerfectOpponent().choose(b, "O", rng) == 7  # wins on the diagonal 3-5-7


def test_dataset_builder_checks_group_size_and_alternates_marks(renderer):
    train, test = run_sync(lambda: TicTacToeDatasetBuilder(renderer, batch_size=2, group_size=4)())
    assert [len(run_sync(b.make_envs)) for b in train.get_batch(0)] == [4, 4]
    assert [b.mark for b in test.get_batch(0)] == ["X", "O"]
    with pytest.raises(ValueError, match="group_size .* must be even"):
        run_sync(lambda: TicTacToeDatasetBuilder(renderer, group_size=3)())


# -- training ----------------------------------------------------------------------------------------------------


def test_self_play_trains_with_env_grpo_trainer(cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    from trl_envs import EnvGRPOTrainer, make_env_dataset

    args = cpu_grpo_config(max_completion_length=4, max_turns=6, sampler_max_wait_s=30.0)
    env = make_env_dataset("tic_tac_toe", renderer, group_size=4, batch_size=2, num_batches=4)
    trainer = EnvGRPOTrainer(tiny_model_path, args, env, processing_class=tokenizer)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "env/tic_tac_toe/reward/total" in h]
    assert logged and "env/tic_tac_toe/illegal" in logged[0]
    groups = trainer.last_rollout.groups
    assert trainer.last_rollout.num_valve_flushes == 0
    for g in groups:
        assert sum(g.group_rewards) == 0


def test_rollout_timeout_does_not_count_time_spent_waiting_on_the_opponent(tokenizer, renderer):
    """Each call takes 0.15 s. A 9-move game lasts ~1.35 s; X's own time (5 calls) is ~0.75 s, under the 1.0 s
    per-rollout timeout, because the clock stops while X is parked waiting for O."""
    moves = iter(["5", "1", "9", "3", "2", "8", "4", "6", "7"])  # a draw: all nine moves

    def slow(text):
        time.sleep(0.15)
        return next(moves)

    async def go():
        return await asyncio.wait_for(
            run_rollout_batch_async(
                [TicTacToeSelfPlayGroupBuilder(renderer, 1)],
                TextPolicySampler(renderer, slow),
                BUDGET,
                RetryOnFailure(max_retries=0, per_rollout_timeout=1.0),
            ),
            timeout=30,
        )

    start = time.perf_counter()
    result = run_sync(go)
    assert time.perf_counter() - start > 1.3
    assert result.groups[0] is not None and result.error_counts == {}
    assert result.groups[0].group_rewards == [0.0, 0.0]
