"""One tic-tac-toe game shared by the two player envs of a self-play group, and how they wait on each other.

Both players run as episodes of the same rollout batch, in one asyncio event loop. A player that has moved waits
for the other's move inside :func:`trl_envs.rollout.batching.parked`, so the batcher samples the other player without
waiting for it (no ``sampler_max_wait_s`` stall per move) and its ``RetryOnFailure`` clock stops meanwhile.

A player never waits forever:

* every wait is bounded by ``move_timeout`` seconds and then raises :class:`OpponentTimeout`;
* a player whose wait is cancelled, or whose env raises, marks the match *abandoned*, and the other player's wait
  raises :class:`OpponentAbandoned` at once;
* ``RetryOnFailure`` retries both players of a game together (``EnvGroupBuilder.coupled_envs``), and ``FailFast``
  cancels the whole group on the first error.
"""

from __future__ import annotations

import asyncio

from ...rollout.batching import ParkedSlot, parked
from .rules import EMPTY_BOARD, Board, Mark, Outcome, other, place, winner


class OpponentTimeout(RuntimeError):
    """The other player did not move within ``move_timeout`` seconds."""


class OpponentAbandoned(RuntimeError):
    """The other player's episode failed or was cancelled mid-game."""


class TicTacToeMatch:
    """The state of one game between two player envs; X moves first.

    Attributes:
        board: the cells (see :mod:`.rules`).
        to_move: whose turn it is.
        result: ``"X"``, ``"O"`` or ``"draw"`` once the game is over, else ``None``.
        forfeited_by: the player who lost by an illegal or unreadable move, if one did.
        abandoned_by: the player whose episode failed or was cancelled mid-game, if one did.
        moves: ``(mark, cell)`` of every legal move, in order.
    """

    def __init__(self, move_timeout: float = 120.0, name: str = "tic_tac_toe match"):
        if move_timeout <= 0:
            raise ValueError(f"{name}: move_timeout must be > 0 seconds, got {move_timeout}")
        self.move_timeout = move_timeout
        self.name = name
        self.board: Board = EMPTY_BOARD
        self.to_move: Mark = "X"
        self.result: Outcome | None = None
        self.forfeited_by: Mark | None = None
        self.abandoned_by: Mark | None = None
        self.moves: list[tuple[Mark, int]] = []
        self._changed: asyncio.Event | None = None
        self._waiting: dict[Mark, ParkedSlot] = {}

    @property
    def over(self) -> bool:
        return self.result is not None

    def score(self, mark: Mark) -> float:
        """Zero-sum outcome for ``mark``: +1 win, -1 loss, 0 draw (0 for an unfinished or abandoned game)."""
        if self.result is None or self.result == "draw":
            return 0.0
        return 1.0 if self.result == mark else -1.0

    def play(self, mark: Mark, cell: int | None) -> None:
        """``mark`` plays ``cell``; ``None``, a taken cell or an unknown one forfeits the game (``mark`` loses)."""
        if self.over:
            raise RuntimeError(f"{self.name}: {mark} moved after the game ended ({self.result})")
        if self.to_move != mark:
            raise RuntimeError(f"{self.name}: {mark} moved out of turn ({self.to_move} to move)")
        if cell is None or not 1 <= cell <= 9 or self.board[cell - 1] != " ":
            self.result, self.forfeited_by = other(mark), mark
        else:
            self.board = place(self.board, cell, mark)
            self.moves.append((mark, cell))
            self.result = winner(self.board)
            self.to_move = other(mark)
        self._notify()

    def abandon(self, mark: Mark) -> None:
        """``mark``'s episode stopped mid-game: wake the other player (its wait raises :class:`OpponentAbandoned`)."""
        if not self.over and self.abandoned_by is None:
            self.abandoned_by = mark
            self._notify()

    async def wait_for_turn(self, mark: Mark) -> None:
        """Return once it is ``mark``'s turn or the game is over.

        The wait is :func:`~trl_envs.rollout.batching.parked` and bounded by ``move_timeout``. Raises
        :class:`OpponentAbandoned` when the other player stopped mid-game and :class:`OpponentTimeout` when it did not
        move in time. If the waiting player is cancelled, the match is marked abandoned by it.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.move_timeout
        try:
            async with parked() as slot:
                self._waiting[mark] = slot
                while not (self.over or self.to_move == mark):
                    if self.abandoned_by is not None and self.abandoned_by != mark:
                        raise OpponentAbandoned(
                            f"{self.name}: player {self.abandoned_by} stopped mid-game "
                            f"(its episode failed or was cancelled); {mark} cannot go on"
                        )
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise OpponentTimeout(
                            f"{self.name}: player {other(mark)} did not move within {self.move_timeout}s. Its episode "
                            "may have failed, been cut by a rollout budget (self-play needs max_turns >= 5 and no "
                            "max_tokens_per_trajectory below 5 moves) or never been run."
                        )
                    if self._changed is None:
                        self._changed = asyncio.Event()
                    changed = self._changed
                    try:
                        await asyncio.wait_for(changed.wait(), remaining)
                    except asyncio.TimeoutError:
                        pass  # the loop raises OpponentTimeout with the reason
        except asyncio.CancelledError:
            self.abandon(mark)
            raise
        finally:
            self._waiting.pop(mark, None)

    def _notify(self) -> None:
        # Unpark the players this change wakes now, not when they next run: the batcher must wait for their requests.
        for mark in list(self._waiting):
            if self.over or self.abandoned_by is not None or self.to_move == mark:
                self._waiting.pop(mark).unpark()
        if self._changed is not None:
            self._changed.set()
            self._changed = None
