"""Tic-tac-toe player envs: a self-play player (one of the two envs sharing a :class:`TicTacToeMatch`) and a player
against a scripted opponent (for evaluation).

Each player's episode is one conversation whose observations extend token-exactly: the opponent's move and the
new board come as a new user message, so one episode trains as one row with the loss on the player's own moves.

Rewards: a finished game is worth +1 (win), 0 (draw) or -1 (loss). An illegal or unreadable move loses the game at
once and also costs ``illegal_move_penalty`` as a step reward. In self-play the outcome is the *group* reward
(:class:`~.builders.TicTacToeSelfPlayGroupBuilder`), zero-sum per game; against a scripted opponent it is the last
step's reward.
"""

from __future__ import annotations

import random

from ...core.message_env import MessageEnv, MessageStepResult
from ...core.renderer import Message, ParsedResponse
from .match import TicTacToeMatch
from .opponents import Opponent
from .rules import EMPTY_BOARD, Board, Mark, Outcome, legal_moves, other, parse_move, place, show, winner

INSTRUCTION = "Pick a free cell between 1 and 9."
"""Ends every message to a player. (Worded so that the offline tiny model, warm-started on "Guess my number between
1 and 16.", answers with a digit most of the time: RL then has legal games to learn from.)"""


def intro(mark: Mark) -> str:
    return f"Tic-tac-toe. You are {mark}."


def board_message(lines: list[str], board: Board) -> Message:
    """A user message: ``lines``, the board, the instruction."""
    return {"role": "user", "content": "\n".join(lines + [show(board), INSTRUCTION])}


def outcome_metrics(result: Outcome | None, mark: Mark, illegal: bool, moves: int) -> dict[str, float]:
    """The per-episode metrics both env kinds report on their last step."""
    return {
        "win": float(result == mark),
        "draw": float(result == "draw"),
        "loss": float(result is not None and result not in (mark, "draw")),
        "illegal": float(illegal),
        "moves": float(moves),
    }


def read_move(response: ParsedResponse) -> int | None:
    """The cell of a reply, or ``None`` when it is unreadable or was cut by a token budget."""
    return parse_move(response.message["content"]) if response.ok else None


class TicTacToePlayerEnv(MessageEnv):
    """One player (``mark``) of a self-play game; the other player is another env of the same group, sharing
    ``match``. Step rewards are 0 except ``-illegal_move_penalty`` for an illegal or unreadable move; the outcome is
    the group reward (see the module docstring)."""

    def __init__(self, match: TicTacToeMatch, mark: Mark, illegal_move_penalty: float = 0.5):
        self.match, self.mark, self.illegal_move_penalty = match, mark, illegal_move_penalty
        self.moves = 0
        self.illegal = False

    async def initial_messages(self) -> list[Message]:
        await self._guarded_wait()
        if self.match.over:  # X forfeited before O's first move; O still answers once (an episode needs an action)
            return [
                board_message(
                    [intro(self.mark), f"{other(self.mark)} made an illegal move and lost."], self.match.board
                )
            ]
        return [board_message([intro(self.mark)] + self._opponent_moved(), self.match.board)]

    async def step(self, response: ParsedResponse) -> MessageStepResult:
        try:
            if self.match.over:
                return self._done(0.0)
            cell = read_move(response)
            self.match.play(self.mark, cell)
            if self.match.forfeited_by == self.mark:
                self.illegal = True
                return self._done(-self.illegal_move_penalty, parse_ok=cell is not None)
            self.moves += 1
            if not self.match.over:
                await self._guarded_wait()
            if self.match.over:
                return self._done(0.0)
            return MessageStepResult(
                0.0, False, [board_message(self._opponent_moved(), self.match.board)], {"parse_ok": 1.0}
            )
        except BaseException:
            self.match.abandon(self.mark)  # never leave the other player waiting on us
            raise

    async def _guarded_wait(self) -> None:
        try:
            await self.match.wait_for_turn(self.mark)
        except BaseException:
            self.match.abandon(self.mark)
            raise

    def _opponent_moved(self) -> list[str]:
        last = self.match.moves[-1] if self.match.moves else None
        return [f"{last[0]} played {last[1]}."] if last is not None and last[0] != self.mark else []

    def _done(self, reward: float, parse_ok: bool = True) -> MessageStepResult:
        metrics = outcome_metrics(self.match.result, self.mark, self.illegal, self.moves) | {
            "parse_ok": float(parse_ok)
        }
        return MessageStepResult(reward, True, [], metrics)


class TicTacToeVsOpponentEnv(MessageEnv):
    """The model plays ``mark`` against a scripted ``opponent`` (which moves inside the env, no sibling to wait on).
    The last step's reward is the outcome (+1/0/-1), minus ``illegal_move_penalty`` after an illegal move."""

    def __init__(self, opponent: Opponent, mark: Mark = "X", seed: int = 0, illegal_move_penalty: float = 0.5):
        self.opponent, self.mark, self.illegal_move_penalty = opponent, mark, illegal_move_penalty
        self.rng = random.Random(seed)
        self.board: Board = EMPTY_BOARD
        self.moves = 0

    async def initial_messages(self) -> list[Message]:
        lines = [intro(self.mark)]
        if self.mark == "O":
            lines.append(self._opponent_move())
        return [board_message(lines, self.board)]

    async def step(self, response: ParsedResponse) -> MessageStepResult:
        cell = read_move(response)
        if cell is None or self.board[cell - 1] != " ":
            metrics = outcome_metrics(other(self.mark), self.mark, True, self.moves) | {
                "parse_ok": float(cell is not None)
            }
            return MessageStepResult(-1.0 - self.illegal_move_penalty, True, [], metrics)
        self.board = place(self.board, cell, self.mark)
        self.moves += 1
        result = winner(self.board)
        if result is None:
            text = self._opponent_move()
            result = winner(self.board)
            if result is None:
                return MessageStepResult(0.0, False, [board_message([text], self.board)], {"parse_ok": 1.0})
        score = 0.0 if result == "draw" else (1.0 if result == self.mark else -1.0)
        return MessageStepResult(
            score, True, [], outcome_metrics(result, self.mark, False, self.moves) | {"parse_ok": 1.0}
        )

    def _opponent_move(self) -> str:
        mark = other(self.mark)
        cell = self.opponent.choose(self.board, mark, self.rng)
        if cell not in legal_moves(self.board):
            raise RuntimeError(f"tic_tac_toe: opponent {self.opponent.name!r} chose taken cell {cell}")
        self.board = place(self.board, cell, mark)
        return f"{mark} played {cell}."
