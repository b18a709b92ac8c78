"""Tic-tac-toe player envs: a player of a match (self-play: the other player is another env of the same group) and
a player against a scripted opponent (for evaluation).

Both are :class:`~trl_envs.multiplayer.player.GamePlayerEnv` s of a :class:`~.game.TicTacToeGame`: each player's
episode is one conversation whose observations extend token-exactly (the opponent's move and the new board come as
a new user message), so one episode trains as one row with the loss on the player's own moves.

Rewards: a finished game is worth +1 (win), 0 (draw) or -1 (loss). An illegal or unreadable move (a reply cut by
the token budget included) loses the game at once and also costs ``illegal_move_penalty`` as a step reward. In
self-play the outcome is the *group* reward (:class:`~.builders.TicTacToeSelfPlayGroupBuilder`), zero-sum per game;
against a scripted opponent it is the last step's reward.

Metrics: ``parse_ok`` on every step; on the last one also ``win``, ``draw``, ``loss``, ``illegal`` (this player lost
by an illegal move) and ``moves`` (its legal moves).
"""

from __future__ import annotations

from ...core.renderer import ParsedResponse
from ...core.types import Metrics
from ...multiplayer.match import GameMatch
from ...multiplayer.player import GamePlayerEnv
from .game import MARKS, TicTacToeGame, seat_of
from .match import TicTacToeMatch
from .opponents import Opponent, TextOpponent
from .rules import Mark, other, parse_move


class TicTacToePlayerEnv(GamePlayerEnv):
    """Player ``mark`` of ``match`` (a :class:`~trl_envs.multiplayer.match.GameMatch` of a
    :class:`~.game.TicTacToeGame`, e.g. a :class:`~.match.TicTacToeMatch`). Step rewards are 0 except
    ``-illegal_move_penalty`` for an illegal or unreadable move; see the module docstring for the outcome."""

    game_over_note = ""  # the game's own text says that the other player lost by an illegal move
    cuts_the_game = False  # a game fits in 5 turns: a player cut by a budget is a misconfiguration the engine ends

    def __init__(
        self, match: GameMatch, mark: Mark, illegal_move_penalty: float = 0.5, *, outcome_reward: bool = False
    ):
        if not isinstance(match.game, TicTacToeGame):
            raise TypeError(f"TicTacToePlayerEnv: expected a match of a TicTacToeGame, got {type(match.game).__name__}")
        super().__init__(match, seat_of(mark), None, illegal_move_penalty, outcome_reward)
        self.mark: Mark = MARKS[self.seat]
        self.illegal_move_penalty = illegal_move_penalty

    @property
    def game(self) -> TicTacToeGame:
        return self.match.game  # type: ignore[return-value]

    def reply(self, response: ParsedResponse) -> str:
        """The reply's text; a reply cut by the token budget plays nothing (an unreadable move)."""
        return response.message["content"] if response.ok else ""

    def metrics(self, reply: str | None, legal: bool, done: bool) -> Metrics:
        parse_ok = {"parse_ok": float(reply is None or parse_move(reply) is not None)}
        if not done:
            return parse_ok
        result, illegal = self.game.result, self.game.forfeited_by == self.mark
        return {
            "win": float(result == self.mark),
            "draw": float(result == "draw"),
            "loss": float(result is not None and result not in (self.mark, "draw")),
            "illegal": float(illegal),
            "moves": float(self.match.moves[self.seat] - self.match.illegal[self.seat]),
        } | parse_ok


class TicTacToeVsOpponentEnv(TicTacToePlayerEnv):
    """The model plays ``mark`` against a scripted ``opponent``, which moves right after the model's move (no
    sibling env to wait on); ``seed`` seeds the opponent. The last step's reward is the outcome (+1/0/-1), minus
    ``illegal_move_penalty`` after an illegal move."""

    def __init__(self, opponent: Opponent, mark: Mark = "X", seed: int = 0, illegal_move_penalty: float = 0.5):
        match = TicTacToeMatch(opponents={other(mark): TextOpponent(opponent)}, seed=seed)
        super().__init__(match, mark, illegal_move_penalty, outcome_reward=True)
        self.opponent = opponent
