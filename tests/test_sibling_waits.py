"""Envs that wait on each other: sampling goes out when the event loop is quiet (no valve stall, no help from the
env), envs at work (a sleep, a thread, a socket) are waited for, siblings left waiting by an env that stopped early
are ended with a recorded reason, and a group that stops making progress fails by name."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from text_policies import free_cells

from trl_envs import (
    Env,
    EnvGroupBuilder,
    FailFast,
    RetryOnFailure,
    RolloutBudget,
    StepResult,
    TokensWithLogprobs,
    run_rollout_batch,
)
from trl_envs.envs.tic_tac_toe import TicTacToeSelfPlayGroupBuilder
from trl_envs.rollout.coupling import GroupStalledError
from trl_envs.rollout.event_loop import run_sync
from trl_envs.rollout.loop_idle import loop_activity
from trl_envs.rollout.worker_threads import use_abandonable_threads
from trl_envs.samplers.text_policy import TextPolicySampler

pytestmark = pytest.mark.timeout(60)


class CountingSampler:
    """Replies ``[7]`` to every request; records the size of each call."""

    def __init__(self, delay: float = 0.0):
        self.batch_sizes: list[int] = []
        self.delay = delay

    def sample(self, requests):
        self.batch_sizes.append(len(requests))
        time.sleep(self.delay)
        return [TokensWithLogprobs([7], [0.0], "stop") for _ in requests]


class Game:
    """Two players taking turns on an ``asyncio.Condition``, the way tinker-cookbook's TwoPlayerCoordinator does."""

    def __init__(self, moves: int):
        self.cond = asyncio.Condition()
        self.to_move, self.moves_left = 0, moves

    async def wait_turn(self, player: int) -> None:
        async with self.cond:
            await self.cond.wait_for(lambda: self.to_move == player or self.moves_left == 0)

    async def move(self, player: int) -> None:
        async with self.cond:
            self.moves_left -= 1
            self.to_move = 1 - player
            self.cond.notify_all()


class PlayerEnv(Env):
    def __init__(self, game: Game, player: int):
        self.game, self.player = game, player

    async def initial_observation(self):
        if self.player == 1:
            await self.game.wait_turn(1)
        return [1, 2, 3], []

    async def step(self, action, *, extra=None):
        await self.game.move(self.player)
        await self.game.wait_turn(self.player)
        return StepResult(0.0, self.game.moves_left == 0, [1, 2, 3], [])


class GameBuilder(EnvGroupBuilder):
    """One game of two players; ``declare_coupled``: says so through ``coupled_envs``."""

    def __init__(self, moves: int, declare_coupled: bool = True):
        self.moves, self.declare_coupled = moves, declare_coupled

    async def make_envs(self):
        game = Game(self.moves)
        return [PlayerEnv(game, 0), PlayerEnv(game, 1)]

    def coupled_envs(self):
        return [[0, 1]] if self.declare_coupled else None


# -- the loop's own view --------------------------------------------------------------------------------------------


def test_loop_activity_tells_work_from_waits_on_siblings():
    async def go():
        loop = asyncio.get_running_loop()
        use_abandonable_threads()
        seen = {"quiet": loop_activity(loop)}
        loop.call_soon(lambda: None)
        seen["ready"] = loop_activity(loop)
        await asyncio.sleep(0)
        condition = asyncio.Condition()

        async def wait_bounded():  # a wait on a sibling bounded by a timeout: the timeout is not work
            async with condition:
                await asyncio.wait_for(condition.wait(), 30)

        async def look(work):
            task = asyncio.ensure_future(work)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            activity = loop_activity(loop)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return activity

        seen["timeout"] = await look(wait_bounded())
        seen["sleep"] = await look(asyncio.sleep(5))
        seen["thread"] = await look(asyncio.to_thread(time.sleep, 0.3))
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            seen["socket"] = await look(loop.sock_recv(a, 1))
        await asyncio.sleep(0.4)  # the thread's sleep has ended
        seen["after"] = loop_activity(loop)
        return seen

    assert run_sync(go) == {
        "quiet": "quiet",
        "ready": "ready",
        "timeout": "quiet",
        "sleep": "waiting",
        "thread": "waiting",
        "socket": "waiting",
        "after": "quiet",
    }


def test_a_loop_whose_default_executor_cannot_be_read_is_unknown():
    async def go():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(__import__("concurrent.futures").futures.ThreadPoolExecutor(1))
        return loop_activity(loop)

    assert asyncio.run(go()) == "unknown"


# -- sibling waits without stalls ----------------------------------------------------------------------------------


def test_turn_taking_on_a_condition_needs_no_valve():
    """4 games of 6 moves: the player waiting on the other is seen to be blocked; no 30 s valve per move."""
    sampler = CountingSampler()
    start = time.perf_counter()
    result = run_rollout_batch([GameBuilder(6) for _ in range(4)], sampler, RolloutBudget(max_turns=10), max_wait_s=30)
    assert time.perf_counter() - start < 10
    assert result.num_valve_flushes == 0 and result.num_idle_flushes == 6
    assert sampler.batch_sizes == [4] * 6  # every game's move n in one call
    assert [[t.stop_reason for t in g.trajectories] for g in result.groups] == [["done", "done"]] * 4


def test_two_batches_on_one_loop_both_go_out_when_it_is_quiet():
    """Each batcher's probe is bookkeeping to the other: neither takes the other for work (no valve, no spinning)."""
    from trl_envs import run_rollout_batch_async

    async def go():
        samplers = [CountingSampler(), CountingSampler()]
        results = await asyncio.gather(
            *(
                run_rollout_batch_async(
                    [GameBuilder(4) for _ in range(2)], s, RolloutBudget(max_turns=10), max_wait_s=30
                )
                for s in samplers
            )
        )
        return samplers, results

    start = time.perf_counter()
    samplers, results = run_sync(go)
    assert time.perf_counter() - start < 10
    assert [r.num_valve_flushes for r in results] == [0, 0]
    assert [s.batch_sizes for s in samplers] == [[2] * 4, [2] * 4]


class WorkingEnv(Env):
    """Two turns; env 0's first step does ``work`` (0.3 s), env 1's steps return at once."""

    def __init__(self, index: int, work):
        self.index, self.work, self.turns = index, work, 0

    async def initial_observation(self):
        return [1, 2], []

    async def step(self, action, *, extra=None):
        self.turns += 1
        if self.index == 0 and self.turns == 1:
            await self.work()
        return StepResult(0.0, self.turns == 2, [1, 2, 3], [])


def _socket_answer_later():
    async def work():
        a, b = socket.socketpair()
        with a, b:
            a.setblocking(False)
            threading.Timer(0.3, b.send, [b"x"]).start()
            await asyncio.get_running_loop().sock_recv(a, 1)

    return work


@pytest.mark.parametrize(
    "work",
    [lambda: asyncio.sleep(0.3), lambda: asyncio.to_thread(time.sleep, 0.3), _socket_answer_later()],
    ids=["sleep", "thread", "socket"],
)
def test_an_env_at_work_is_waited_for_not_taken_for_idle(work):
    class Builder(EnvGroupBuilder):
        async def make_envs(self):
            return [WorkingEnv(0, work), WorkingEnv(1, work)]

    sampler = CountingSampler()
    result = run_rollout_batch([Builder()], sampler, RolloutBudget(max_turns=4), max_wait_s=30)
    assert sampler.batch_sizes == [2, 2]  # env 1's second request waited for env 0's
    assert result.num_valve_flushes == 0 and result.num_idle_flushes == 0


# -- coupled groups end together -----------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [FailFast(), RetryOnFailure(max_retries=1)], ids=["fail_fast", "retry"])
def test_a_player_ended_by_a_budget_does_not_leave_the_other_waiting(strategy):
    start = time.perf_counter()
    result = run_rollout_batch(
        [GameBuilder(6) for _ in range(2)], CountingSampler(), RolloutBudget(max_turns=1), strategy, max_wait_s=30
    )
    assert time.perf_counter() - start < 10
    for group in result.groups:
        first, second = group.trajectories
        assert (first.stop_reason, len(first.transitions)) == ("max_turns", 1)
        # the second player's move went in, its step never returned: kept as its last turn, unrewarded
        assert (second.stop_reason, len(second.transitions)) == ("sibling_ended", 1)
        assert second.transitions[0].logs["ended"] == "GameBuilder: env 0 (PlayerEnv) stopped by max_turns"
    assert result.num_sibling_endings == 2 and result.error_counts == {"SiblingEnded": 2}


def test_our_self_play_player_left_parked_by_a_budget_is_ended_at_once(renderer):
    sampler = TextPolicySampler(renderer, lambda text: str((free_cells(text) or [1])[0]))
    start = time.perf_counter()
    result = run_rollout_batch(
        [TicTacToeSelfPlayGroupBuilder(renderer, num_games=2)],
        sampler,
        RolloutBudget(max_turns=1, max_tokens_per_turn=8),
    )
    assert time.perf_counter() - start < 10  # not the 120 s move_timeout
    (group,) = result.groups
    assert sorted(t.stop_reason for t in group.trajectories) == ["max_turns"] * 2 + ["sibling_ended"] * 2


def test_a_group_that_stops_making_progress_fails_by_name():
    """Not declared coupled and not parked: the blocked player is the stall timeout's."""
    budget = RolloutBudget(max_turns=1, group_stall_timeout_s=0.4)
    start = time.perf_counter()
    with pytest.raises(
        GroupStalledError,
        match=r"GameBuilder: no episode of the group .* for \d+s "
        r"\(group_stall_timeout_s=0.4\); GameBuilder: env 1 \(PlayerEnv\) "
        r"was in PlayerEnv.step \(turn 0\)",
    ):
        run_rollout_batch([GameBuilder(6, declare_coupled=False)], CountingSampler(), budget, max_wait_s=30)
    assert time.perf_counter() - start < 10


def test_a_slow_model_is_not_a_stalled_group():
    result = run_rollout_batch(
        [GameBuilder(2)],
        CountingSampler(delay=0.5),
        RolloutBudget(max_turns=4, group_stall_timeout_s=0.2),
        max_wait_s=30,
    )
    assert result.num_stalled_groups == 0
    assert [t.stop_reason for t in result.groups[0].trajectories] == ["done", "done"]


def test_group_stall_timeout_is_checked():
    with pytest.raises(ValueError, match="group_stall_timeout_s must be > 0 or None"):
        RolloutBudget(group_stall_timeout_s=0)
