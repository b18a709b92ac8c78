"""Tic-tac-toe as a game on trl_envs.multiplayer: what it keeps of its own conventions (a reply cut by the token
budget loses, the forfeit message, players named by mark) on the shared coordinator."""

from __future__ import annotations

import asyncio
import random

import pytest

from trl_envs import RolloutBudget, run_rollout_batch
from trl_envs.envs.tic_tac_toe import (
    PerfectOpponent,
    TextOpponent,
    TicTacToeMatch,
    TicTacToeSelfPlayGroupBuilder,
)
from trl_envs.envs.tic_tac_toe.rules import EMPTY_BOARD, place, read_board, show
from trl_envs.multiplayer import GameMatch
from trl_envs.multiplayer.player import GAME_OVER
from trl_envs.rollout.event_loop import run_sync
from trl_envs.samplers.text_policy import TextPolicySampler

pytestmark = pytest.mark.timeout(120)


def test_an_illegal_first_move_loses_and_the_other_player_is_told_so(tokenizer, renderer):
    replies = iter(["banana", "5"])
    result = run_rollout_batch(
        [TicTacToeSelfPlayGroupBuilder(renderer, 1)],
        TextPolicySampler(renderer, lambda text: next(replies)),
        RolloutBudget(max_turns=9, max_tokens_per_turn=8),
    )
    group = result.groups[0]
    x, o = group.trajectories
    assert group.group_rewards == [-1.0, 1.0] and x.step_reward == -0.5
    assert x.transitions[-1].metrics == {
        "win": 0.0,
        "draw": 0.0,
        "loss": 1.0,
        "illegal": 1.0,
        "moves": 0.0,
        "parse_ok": 0.0,
    }
    o_text = tokenizer.decode(o.final_ob)
    assert "You are O.\nX made an illegal move and lost." in o_text and GAME_OVER not in o_text
    assert o.transitions[-1].metrics["win"] == 1.0


def test_a_reply_cut_by_the_token_budget_is_unreadable_and_loses(renderer):
    """'5' cut before its end-of-turn token reads as a cell but did not end: it loses, as an unreadable reply."""
    result = run_rollout_batch(
        [TicTacToeSelfPlayGroupBuilder(renderer, 1)],
        TextPolicySampler(renderer, lambda text: "5"),
        RolloutBudget(max_turns=9, max_tokens_per_turn=1),
    )
    x, _ = result.groups[0].trajectories
    final = x.transitions[-1].metrics
    assert (final["illegal"], final["parse_ok"], result.groups[0].group_rewards) == (1.0, 0.0, [-1.0, 1.0])


def test_the_match_is_a_game_match_addressed_by_mark_or_seat():
    match = TicTacToeMatch(move_timeout=5)
    assert isinstance(match, GameMatch) and match.to_move == "X"
    assert match.play("X", 5) and match.play(1, "1") and match.to_move == "X"
    assert match.board == place(place(EMPTY_BOARD, 5, "X"), 1, "O")
    with pytest.raises(RuntimeError, match="player O moved out of turn \\(player X to move\\)"):
        match.play("O", 2)
    assert not match.play("X", 1)  # a taken cell forfeits
    assert (match.result, match.forfeited_by, match.score("O"), match.score(0)) == ("O", "X", 1.0, -1.0)
    with pytest.raises(ValueError, match="a player is 'X', 'O', 0 or 1, got 'Z'"):
        match.play("Z", 3)

    async def wait():
        await match.wait_for_turn("O")  # the game is over: no wait

    run_sync(lambda: asyncio.wait_for(wait(), 1))


def test_a_scripted_opponent_plays_a_seat_from_the_text_it_is_shown():
    board = place(place(place(EMPTY_BOARD, 1, "X"), 5, "O"), 2, "X")
    assert read_board(f"X played 2.\n{show(board)}\nPick a free cell between 1 and 9.") == board
    assert TextOpponent(PerfectOpponent())(show(board), random.Random(0)) == "3"  # O blocks
    match = TicTacToeMatch(opponents={"O": TextOpponent(PerfectOpponent())})
    match.play("X", 1)
    assert match.board[4] == "O" and match.to_move == "X"  # the opponent answered at once: the centre
