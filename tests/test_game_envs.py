"""TextArena and PettingZoo games as env groups: self-play with game rewards as group rewards, a fixed opponent,
illegal replies handled by the game's rules, turn-taking without the batcher's valve, GRPO training on the tiny
model, ``trl-envs eval``, and the errors of bad names and options."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest

from trl_envs import RolloutBudget, run_rollout_batch
from trl_envs.rollout.event_loop import run_sync
from trl_envs.samplers.text_policy import TextPolicySampler

pytestmark = pytest.mark.timeout(300)
TEXTARENA = "textarena/TicTacToe-v0"
PETTINGZOO = "pettingzoo/classic/tictactoe_v3"
BUDGET = RolloutBudget(max_turns=10, max_tokens_per_turn=8)


def needs(name):
    pytest.importorskip(name.split("/")[0])
    if name == PETTINGZOO:
        pytest.importorskip("pygame")


def last_user(text):
    return text.rsplit("<|im_start|>user", 1)[-1]


def legal_moves(name, text):
    """The legal moves the game listed in its last message."""
    last = last_user(text)
    if name == TEXTARENA:
        found = re.findall(r"Available Moves:(.*)", last)
        return re.findall(r"\[(\d+)\]", found[-1]) if found else []
    found = re.findall(r"Pick a free cell:(.*)", last)
    return re.findall(r"\d+", found[-1]) if found else []


def player(name, seed=0, illegal=None):
    """A scripted player: a random legal move, or ``illegal(text)`` when it returns a reply."""
    rng = random.Random(seed)

    def respond(text):
        if illegal is not None and (reply := illegal(text)) is not None:
            return reply
        moves = legal_moves(name, text)
        return rng.choice(moves) if moves else "0"

    return respond


def rollout(name, renderer, policy, split=0, group_size=4, **options):
    from trl_envs.registry import make_env_dataset

    train, test = run_sync(
        make_env_dataset(
            name, renderer, group_size=group_size, groups_per_batch=2, num_batches=1, num_test_batches=1, **options
        )
    )
    return run_rollout_batch((train, test)[split].get_batch(0), TextPolicySampler(renderer, policy), BUDGET)


@pytest.mark.parametrize("name", [TEXTARENA, PETTINGZOO])
def test_self_play_games_are_zero_sum_group_rewards_without_valve_stalls(name, renderer):
    needs(name)
    result = rollout(name, renderer, player(name))
    assert result.num_valve_flushes == 0 and result.error_counts == {}
    for group in result.groups:
        assert len(group.group_rewards) == 4
        for game in (group.group_rewards[:2], group.group_rewards[2:]):
            assert sum(game) == 0 and sorted(game) in ([-1.0, 1.0], [0.0, 0.0])
        tokens = group.trajectories[0].transitions
        for before, after in itertools.pairwise(tokens):  # one growing conversation per seat
            assert after.ob[: len(before.ob)] == before.ob


@pytest.mark.parametrize("name", [TEXTARENA, PETTINGZOO])
def test_an_illegal_reply_is_ruled_by_the_game(name, renderer):
    """The first seat always plays cell 4, taken after its first move. TextArena's TicTacToe asks once to resubmit
    (its error allowance) and then ends the game, the other seat winning; PettingZoo's TerminateIllegalWrapper ends
    it at once, the offender at -1 and the other at 0."""
    needs(name)

    def policy(text):
        first_user = text.split("<|im_start|>user", 1)[1][:200]
        first_seat = "You are Player 0" in first_user if name == TEXTARENA else "player_1 played" not in first_user
        if first_seat:
            return "4"
        return next(m for m in legal_moves(name, text) if m != "4")

    result = rollout(name, renderer, policy, group_size=2)
    for group in result.groups:
        first = group.trajectories[0].transitions
        assert group.group_rewards == ([-1.0, 1.0] if name == TEXTARENA else [-1.0, 0.0])
        assert first[-1].metrics["illegal_moves"] == (2.0 if name == TEXTARENA else 1.0)
        assert first[-1].metrics["loss"] == 1.0
        if name == TEXTARENA:
            assert "attempted an invalid move" in renderer.tokenizer.decode(first[-1].ob)


@pytest.mark.parametrize("name", [TEXTARENA, PETTINGZOO])
def test_a_seat_cut_by_max_turns_ends_the_game_for_the_others_at_once(name, renderer):
    """With max_turns=2 no game can finish; the seat left waiting ends at once (no move_timeout wait), unfinished."""
    needs(name)
    from trl_envs.registry import make_env_dataset

    train, _ = run_sync(make_env_dataset(name, renderer, group_size=2, groups_per_batch=1, num_batches=1))
    result = run_rollout_batch(
        train.get_batch(0), TextPolicySampler(renderer, player(name)), RolloutBudget(max_turns=2, max_tokens_per_turn=8)
    )
    group = result.groups[0]
    assert result.error_counts == {} and result.wall_seconds < 30
    assert group.group_rewards == [0.0, 0.0]
    assert [t.stop_reason for t in group.trajectories].count("max_turns") >= 1
    assert any(t.transitions[-1].metrics.get("cut") == 1.0 for t in group.trajectories)


def test_pettingzoo_reply_without_an_action_forfeits_and_other_seats_get_zero(renderer):
    needs(PETTINGZOO)
    result = rollout(PETTINGZOO, renderer, lambda text: "banana", group_size=2)
    for group in result.groups:
        assert group.group_rewards == [-1.0, 0.0]
        assert "no action" in renderer.tokenizer.decode(group.trajectories[1].transitions[0].ob)


@pytest.mark.parametrize("name", [TEXTARENA, PETTINGZOO])
def test_test_split_plays_a_random_opponent(name, renderer):
    """Every env is its own game against the random opponent; env g of a group plays seat g % 2."""
    needs(name)
    result = rollout(name, renderer, player(name, seed=1), split=1)
    for group in result.groups:
        assert len(group.trajectories) == 4 and all(r in (-1.0, 0.0, 1.0) for r in group.group_rewards)
        first_prompt = renderer.tokenizer.decode(group.trajectories[1].transitions[0].ob)
        opponent_moved = "[Player 0]" in first_prompt if name == TEXTARENA else "player_1 played" in first_prompt
        assert opponent_moved  # env 1 of a group plays seat 1: the opponent (seat 0) opened


def test_pettingzoo_parallel_api_plays_through_parallel_to_aec(renderer):
    needs(PETTINGZOO)
    from trl_envs.pettingzoo import PettingZooGame

    game = PettingZooGame("classic/rps_v2", seed=0, make_kwargs={"num_actions": 3, "max_cycles": 2}, api="parallel")
    assert game.num_players == 2
    for _ in range(2):
        for seat in (0, 1):
            assert game.to_move() == seat and "Legal actions: 0, 1, 2" in game.observe(seat)
            assert game.play(seat, str(seat))  # rock vs paper: seat 1 wins each round
    assert game.to_move() is None and game.rewards() == {0: -2.0, 1: 2.0}


@pytest.mark.parametrize("name", [TEXTARENA, PETTINGZOO])
def test_self_play_trains_two_grpo_steps(name, cpu_grpo_config, tiny_model_path, tokenizer, renderer):
    needs(name)
    from trl_envs import EnvGRPOTrainer, make_env_dataset

    args = cpu_grpo_config(max_steps=2, max_completion_length=4, max_turns=6, sampler_max_wait_s=30.0)
    env = make_env_dataset(name, renderer, group_size=4, batch_size=2, num_batches=4)
    trainer = EnvGRPOTrainer(tiny_model_path, args, env, processing_class=tokenizer)
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(f"env/{name}/reward/total" in h for h in trainer.state.log_history)
    assert trainer.last_rollout.num_valve_flushes == 0
    for group in trainer.last_rollout.groups:
        assert sum(group.group_rewards) <= 0  # zero-sum, or a forfeit that only costs the offender


@pytest.mark.parametrize("name", [TEXTARENA, PETTINGZOO])
def test_trl_envs_eval_plays_a_game_against_the_random_opponent(name, tmp_path, tiny_model_path):
    needs(name)
    from trl_envs.cli.commands import main

    out = tmp_path / "eval.json"
    assert (
        main(
            [
                "eval",
                "--model",
                tiny_model_path,
                "--env",
                name,
                "--num_problems",
                "2",
                "--samples_per_problem",
                "2",
                "--max_tokens",
                "4",
                "--max_turns",
                "6",
                "--device",
                "cpu",
                "--no_progress",
                "--output",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())


def test_bad_names_and_options_are_named(renderer):
    needs(TEXTARENA)
    needs(PETTINGZOO)
    from trl_envs.registry import (
        EnvRowError,
        UnknownEnvError,
        get_env,
        list_envs,
        make_env_dataset,
        make_env_group_builder,
    )

    with pytest.raises(UnknownEnvError, match="did you mean 'textarena/TicTacToe-v0'"):
        get_env("textarena/TicTacToo-v0")
    with pytest.raises(UnknownEnvError, match="did you mean 'pettingzoo/classic/tictactoe_v3'"):
        get_env("pettingzoo/classic/tictactoe_v2")
    with pytest.raises(ValueError, match="group_size .* must be a multiple of num_players=2; got 3"):
        make_env_dataset(TEXTARENA, renderer, group_size=3)
    with pytest.raises(ValueError, match=r"no option 'opponnent'; its options are \[.*'opponent'"):
        make_env_dataset(PETTINGZOO, renderer, opponnent="random")
    with pytest.raises(ValueError, match="option 'api' must be 'aec' or 'parallel'"):
        make_env_dataset(PETTINGZOO, renderer, api="sync")
    with pytest.raises(ValueError, match="option 'opponent' must be 'random'"):
        make_env_dataset(TEXTARENA, renderer, opponent="perfect")
    with pytest.raises(ValueError, match="could not start the game with num_players=5"):
        make_env_dataset(TEXTARENA, renderer, num_players=5, group_size=5)
    with pytest.raises(EnvRowError, match="field 'sede'"):
        make_env_group_builder({"env": PETTINGZOO, "sede": 1}, renderer, 2)
    names = list_envs()
    assert TEXTARENA in names and PETTINGZOO in names


def test_trl_envs_play_and_a_mistyped_name_on_the_command_line(tiny_model_path, monkeypatch, capsys):
    needs(TEXTARENA)
    import io

    from trl_envs.cli.commands import main

    monkeypatch.setattr("sys.stdin", io.StringIO("4\n0\n8\n2\n6\n1\n3\n5\n7\n"))
    assert (
        main(["play", TEXTARENA, "--model_name_or_path", tiny_model_path, "--env_kwargs", '{"opponent": "random"}'])
        == 0
    )
    out = capsys.readouterr().out
    assert "[GAME] You are Player 0 in Tic Tac Toe." in out and "total reward" in out
    assert main(["eval", "--model", tiny_model_path, "--env", "textarena/TicTacToo-v0"]) == 2
    assert "did you mean 'textarena/TicTacToe-v0'" in capsys.readouterr().err


def test_rows_of_both_libraries_play_in_one_batch_and_builders_pickle(renderer):
    needs(TEXTARENA)
    needs(PETTINGZOO)
    import pickle

    from trl_envs.registry.env_datasets import EnvRowDataset

    rows = [{"env": PETTINGZOO, "seed": 1}, {"env": TEXTARENA, "seed": 2, "opponent": "random", "seat": 1}]
    builders = EnvRowDataset(rows, renderer, group_size=2, groups_per_batch=2).get_batch(0)
    builders = [pickle.loads(pickle.dumps(b)) for b in builders]

    def policy(text):
        name = TEXTARENA if "[GAME]" in text else PETTINGZOO
        return player(name)(text)

    result = run_rollout_batch(builders, TextPolicySampler(renderer, policy), BUDGET)
    assert result.error_counts == {} and result.num_valve_flushes == 0
    pz, ta = result.groups
    assert len(pz.trajectories) == 2 and sum(pz.group_rewards) <= 0  # one self-play game
    assert len(ta.trajectories) == 2 and all(
        "[Player 0]" in renderer.tokenizer.decode(t.transitions[0].ob) for t in ta.trajectories
    )  # the model is seat 1: the opponent opened


def test_a_failing_seat_is_retried_with_its_whole_game_and_nothing_hangs(renderer):
    """Seat 1's first reply raises once: RetryOnFailure replays both seats of that game (coupled envs); the other
    seat, parked waiting, is woken rather than left to its move_timeout."""
    needs(PETTINGZOO)
    from trl_envs import RetryOnFailure
    from trl_envs.registry import make_env_dataset

    failed = []

    def policy(text):
        if "player_1 played" in text and not failed:
            failed.append(text)
            raise RuntimeError("sampler hiccup")
        return player(PETTINGZOO)(text)

    train, _ = run_sync(
        make_env_dataset(PETTINGZOO, renderer, group_size=2, groups_per_batch=1, num_batches=1, move_timeout=60.0)
    )
    result = run_rollout_batch(
        train.get_batch(0), TextPolicySampler(renderer, policy), BUDGET, RetryOnFailure(max_retries=2)
    )
    assert failed and result.wall_seconds < 30
    assert result.error_counts.get("RuntimeError") == 1 and result.groups[0] is not None
    assert sorted(result.groups[0].group_rewards) in ([-1.0, 1.0], [0.0, 0.0])


def test_a_textarena_game_keeps_its_own_random_stream():
    """TextArena reseeds the global ``random`` on reset and draws from it while playing: a game must neither move the
    process's stream (other envs draw their problems from it) nor depend on what others drew (same seed, same
    game)."""
    pytest.importorskip("textarena")
    from trl_envs.textarena.game import TextArenaGame

    random.seed(123)
    expected = [random.random() for _ in range(3)]
    random.seed(123)
    first = TextArenaGame("Battleship-v0", 2, seed=7)
    drawn = [random.random()]
    first.play(0, "[A0]")
    drawn += [random.random(), random.random()]
    assert drawn == expected  # the process's stream went on as if no game had been made or played

    again = TextArenaGame("Battleship-v0", 2, seed=7)  # after other draws: the same board
    other = TextArenaGame("Battleship-v0", 2, seed=8)
    assert again.observe(0) == TextArenaGame("Battleship-v0", 2, seed=7).observe(0) != other.observe(0)
