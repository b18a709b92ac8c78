"""One game shared by the player envs of a group, and how they wait on each other.

All seats run as episodes of the same rollout batch, in one asyncio event loop. A seat that has moved waits for its
next turn inside :func:`trl_envs.rollout.batching.parked`, so the batcher samples the other seats without waiting
for it (no ``sampler_max_wait_s`` stall per move) and its ``RetryOnFailure`` clock stops meanwhile. Seats played by a
fixed opponent move inside :meth:`GameMatch.play`, right after the seat before them.

A seat never waits forever: every wait is bounded by ``move_timeout`` seconds (then :class:`OpponentTimeout`), a
seat whose episode fails or is cancelled marks the match *abandoned*, which wakes the others with
:class:`OpponentAbandoned`, and a seat whose episode ends while the game goes on (cut by the rollout's
``max_turns`` or token budget: a game with retries after illegal moves can outlast it) marks the match *cut*: the
others end their episodes at once, the game unfinished, every seat's game reward 0. ``RetryOnFailure`` retries the
seats of one game together
(:meth:`~trl_envs.multiplayer.group.GameGroupBuilder.coupled_envs`).
"""

from __future__ import annotations

import asyncio
import random

from ..rollout.batching import ParkedSlot, parked
from .game import Opponent, TurnGame

MAX_OPPONENT_MOVES_IN_A_ROW = 1000
"""A fixed opponent that keeps the turn this many moves in a row (a game that lets it retry illegal moves forever)
raises ``RuntimeError`` rather than spin."""


class OpponentTimeout(RuntimeError):
    """Another seat did not move within ``move_timeout`` seconds."""


class OpponentAbandoned(RuntimeError):
    """Another seat's episode failed or was cancelled mid-game."""


class GameMatch:
    """The state of one game between the seats of a group.

    Args:
        game: the game, already reset.
        opponents: seats played by a fixed opponent: an :data:`~trl_envs.multiplayer.game.Opponent` callable or
            ``"random"`` (the game's :meth:`~trl_envs.multiplayer.game.TurnGame.random_reply`). Other seats are envs.
        move_timeout: seconds a seat waits for its turn before :class:`OpponentTimeout`.
        seed: seeds the opponents' rng.

    Attributes:
        abandoned_by: the seat whose episode stopped mid-game, if one did.
        illegal: illegal replies per seat. moves: replies per seat (legal or not).
    """

    def __init__(
        self,
        game: TurnGame,
        opponents: dict[int, Opponent | str] | None = None,
        move_timeout: float = 120.0,
        seed: int = 0,
    ):
        if move_timeout <= 0:
            raise ValueError(f"{game.name}: move_timeout must be > 0 seconds, got {move_timeout}")
        self.game, self.move_timeout = game, move_timeout
        self.opponents = dict(opponents or {})
        for seat, opponent in self.opponents.items():
            if not (callable(opponent) or opponent == "random"):
                raise ValueError(
                    f"{game.name}: the opponent of seat {seat} must be 'random' or a callable "
                    f"(text, rng) -> reply, got {opponent!r}"
                )
        self.rng = random.Random(seed)
        self.abandoned_by: int | None = None
        self.cut_by: int | None = None
        self._watched: set[int] = set()
        self.illegal = [0] * game.num_players
        self.moves = [0] * game.num_players
        self._changed: asyncio.Event | None = None
        self._waiting: dict[int, ParkedSlot] = {}
        self._play_opponents()

    @property
    def over(self) -> bool:
        """The game ended (or was abandoned)."""
        return self.abandoned_by is not None or self.cut_by is not None or self.game.to_move() is None

    def watch(self, seat: int) -> None:
        """Called by ``seat``'s env from inside its episode: when that episode's task ends while the game goes on,
        the match is cut (see the module docstring)."""
        task = asyncio.current_task()
        if task is not None and seat not in self._watched:
            self._watched.add(seat)
            task.add_done_callback(lambda _: self._cut(seat))

    def _cut(self, seat: int) -> None:
        if not self.over:
            self.cut_by = seat
            self._notify()

    def score(self, seat: int) -> float:
        """``seat``'s game reward: the game's own (zero-sum where the game is); 0 for an unfinished or abandoned
        game."""
        if self.abandoned_by is not None or self.cut_by is not None or self.game.to_move() is not None:
            return 0.0
        return float(self.game.rewards().get(seat, 0.0))

    def play(self, seat: int, reply: str) -> bool:
        """``seat`` replies; the game applies it by its rules, then fixed opponents move. Returns whether it was
        legal. Raises ``RuntimeError`` for a move out of turn or after the end."""
        to_move, name = self.game.to_move(), self.game.seat_name
        if self.over:
            raise RuntimeError(f"{self.game.name}: {name(seat)} moved after the game ended")
        if to_move != seat:
            raise RuntimeError(f"{self.game.name}: {name(seat)} moved out of turn ({name(to_move)} to move)")
        legal = self._apply(seat, reply)
        self._play_opponents()
        self._notify()
        return legal

    def abandon(self, seat: int) -> None:
        """``seat``'s episode stopped mid-game: wake the others (their waits raise :class:`OpponentAbandoned`)."""
        if not self.over:
            self.abandoned_by = seat
            self._notify()

    async def wait_for_turn(self, seat: int) -> None:
        """Return once it is ``seat``'s turn or the game is over; parked and bounded by ``move_timeout`` (see the
        module docstring). A cancelled wait abandons the match."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.move_timeout
        try:
            async with parked() as slot:
                self._waiting[seat] = slot
                while not (self.over or self.game.to_move() == seat):
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise OpponentTimeout(
                            f"{self.game.name}: {self.game.seat_name(self.game.to_move())} did not move within "
                            f"{self.move_timeout}s; "
                            "its episode may have failed, been cut by a rollout budget (max_turns must cover a whole "
                            "game) or never been run"
                        )
                    if self._changed is None:
                        self._changed = asyncio.Event()
                    changed = self._changed
                    try:
                        await asyncio.wait_for(changed.wait(), remaining)
                    except asyncio.TimeoutError:
                        pass  # the loop raises OpponentTimeout
                if self.abandoned_by is not None and self.abandoned_by != seat:
                    raise OpponentAbandoned(
                        f"{self.game.name}: {self.game.seat_name(self.abandoned_by)} stopped mid-game (its "
                        f"episode failed or was cancelled); {self.game.seat_name(seat)} cannot go on"
                    )
        except asyncio.CancelledError:
            self.abandon(seat)
            raise
        finally:
            self._waiting.pop(seat, None)

    def _apply(self, seat: int, reply: str) -> bool:
        legal = bool(self.game.play(seat, reply))
        self.moves[seat] += 1
        self.illegal[seat] += not legal
        return legal

    def _play_opponents(self) -> None:
        for _ in range(MAX_OPPONENT_MOVES_IN_A_ROW):
            seat = self.game.to_move()
            if seat is None or seat not in self.opponents:
                return
            opponent = self.opponents[seat]
            text = self.game.observe(seat)
            reply = self.game.random_reply(seat, self.rng) if opponent == "random" else opponent(text, self.rng)
            self._apply(seat, str(reply))
        raise RuntimeError(
            f"{self.game.name}: the fixed opponent kept the turn for {MAX_OPPONENT_MOVES_IN_A_ROW} moves in a row"
        )

    def _notify(self) -> None:
        # Unpark the seats this change wakes now, not when they next run: the batcher must wait for their requests.
        to_move = None if self.over else self.game.to_move()
        for seat in list(self._waiting):
            if to_move is None or to_move == seat:
                self._waiting.pop(seat).unpark()
        if self._changed is not None:
            self._changed.set()
            self._changed = None
