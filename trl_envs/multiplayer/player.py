"""One seat of a :class:`~trl_envs.multiplayer.match.GameMatch` as a multi-turn chat env.

Each turn the seat is shown, as a new user message, the game's text it has not seen yet (the others' moves, the new
state, the game's verdict on an illegal reply) and answers with its move. The conversation extends token-exactly
(:class:`~trl_envs.core.message_env.MessageTokenEnv`), so one seat's game trains as one row with the loss on its
own replies.

Rewards: step rewards are 0, except ``-invalid_reply_penalty`` for a reply the game ruled illegal (the game's own
rules apply first: a retry, a penalty or a loss). The game's outcome for the seat is its *group* reward
(:meth:`~trl_envs.multiplayer.group.GameGroupBuilder.compute_group_rewards`). Metrics on the last step:
``game_reward``, ``win`` / ``loss`` / ``draw`` (game reward > 0 / < 0 / = 0), ``moves``, ``illegal_moves`` and
``cut`` (the game was cut by another seat's rollout budget, see :mod:`~trl_envs.multiplayer.match`).
"""

from __future__ import annotations

from ..core.message_env import MessageEnv, MessageStepResult
from ..core.renderer import Message, ParsedResponse
from ..core.types import Metrics
from .match import GameMatch

NOTHING_NEW = "Your move."
"""The user message of a turn on which the game has nothing new to show the seat."""

GAME_OVER = "The game is over before your turn."
"""Ends the first message of a seat whose game ended before its first turn (it still answers once: an episode needs
an action)."""


class GamePlayerEnv(MessageEnv):
    """Seat ``seat`` of ``match``, played by the model.

    Args:
        match: the shared game.
        seat: this env's seat.
        system_prompt: an optional system message before the game's first text.
        invalid_reply_penalty: subtracted from the step reward of a reply the game ruled illegal.
        outcome_reward: add the seat's game reward to its last step's reward. Leave it off inside a
            :class:`~trl_envs.multiplayer.group.GameGroupBuilder`, which gives the game reward as the group reward;
            turn it on for a seat played on its own (against fixed opponents), so its episode still earns the outcome.

    A game with its own conventions subclasses this env and overrides :meth:`reply` (how a response becomes the
    text played), :meth:`metrics` (what each step reports), :attr:`game_over_note` or :attr:`cuts_the_game`.
    """

    game_over_note: str = GAME_OVER
    """Added to the first message of a seat whose game ended before its first turn (empty: nothing added)."""

    cuts_the_game: bool = True
    """This seat's episode ending mid-game (a rollout budget) cuts the match, ending the others' episodes as
    finished, unrewarded games (metric ``cut``). Off: the others stay parked and the rollout engine ends them
    (stop reason ``sibling_ended``, their last move an unrewarded turn)."""

    def __init__(
        self,
        match: GameMatch,
        seat: int,
        system_prompt: str | None = None,
        invalid_reply_penalty: float = 0.0,
        outcome_reward: bool = False,
    ):
        if not 0 <= seat < match.game.num_players:
            raise ValueError(f"{match.game.name}: seat {seat} out of range (0..{match.game.num_players - 1})")
        self.match, self.seat = match, seat
        self.system_prompt, self.invalid_reply_penalty = system_prompt, invalid_reply_penalty
        self.outcome_reward = outcome_reward

    async def initial_messages(self) -> list[Message]:
        await self._guarded_wait()
        prefix: list[Message] = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        # the game may have ended before this seat's first turn (an illegal opening); it still answers once
        message = self._user_message()
        if self.match.over and self.game_over_note:
            message["content"] += "\n" + self.game_over_note
        return prefix + [message]

    async def step(self, response: ParsedResponse) -> MessageStepResult:
        try:
            if self.match.over:
                return self._done(0.0, None, True)
            reply = self.reply(response)
            legal = self.match.play(self.seat, reply)
            reward = 0.0 if legal else -self.invalid_reply_penalty
            if not self.match.over:
                await self._guarded_wait()
            if self.match.over:
                return self._done(reward, reply, legal)
            return MessageStepResult(
                reward, False, [self._user_message()], self.metrics(reply, legal, False), {"reply": reply}
            )
        except BaseException:
            self.match.abandon(self.seat)  # never leave the other seats waiting on us
            raise

    def reply(self, response: ParsedResponse) -> str:
        """The text this seat plays for ``response``: its content (the game rules on it, even on a reply cut by the
        token budget)."""
        return response.message["content"]

    def metrics(self, reply: str | None, legal: bool, done: bool) -> Metrics:
        """The metrics of a step: ``legal`` on every step; on the last one also ``game_reward``, ``win`` /
        ``loss`` / ``draw``, ``moves``, ``illegal_moves`` and ``cut`` (see the module docstring). ``reply`` is
        ``None`` on a step taken after the game ended (nothing was played)."""
        if not done:
            return {"legal": float(legal)}
        score = self.match.score(self.seat)
        return {
            "legal": float(legal),
            "game_reward": score,
            "win": float(score > 0),
            "loss": float(score < 0),
            "draw": float(score == 0),
            "moves": float(self.match.moves[self.seat]),
            "illegal_moves": float(self.match.illegal[self.seat]),
            "cut": float(self.match.cut_by is not None),
        }

    async def _guarded_wait(self) -> None:
        if self.cuts_the_game:
            self.match.watch(self.seat)
        try:
            await self.match.wait_for_turn(self.seat)
        except BaseException:
            self.match.abandon(self.seat)
            raise

    def _user_message(self) -> Message:
        text = self.match.game.observe(self.seat).strip()
        return {"role": "user", "content": text or NOTHING_NEW}

    def _done(self, reward: float, reply: str | None, legal: bool) -> MessageStepResult:
        if self.outcome_reward:
            reward += self.match.score(self.seat)
        return MessageStepResult(reward, True, [], self.metrics(reply, legal, True))
