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
    """

    def __init__(
        self, match: GameMatch, seat: int, system_prompt: str | None = None, invalid_reply_penalty: float = 0.0
    ):
        if not 0 <= seat < match.game.num_players:
            raise ValueError(f"{match.game.name}: seat {seat} out of range (0..{match.game.num_players - 1})")
        self.match, self.seat = match, seat
        self.system_prompt, self.invalid_reply_penalty = system_prompt, invalid_reply_penalty

    async def initial_messages(self) -> list[Message]:
        await self._guarded_wait()
        prefix: list[Message] = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        # the game may have ended before this seat's first turn (an illegal opening); it still answers once
        message = self._user_message()
        if self.match.over:
            message["content"] += "\n" + GAME_OVER
        return prefix + [message]

    async def step(self, response: ParsedResponse) -> MessageStepResult:
        try:
            if self.match.over:
                return self._done(0.0)
            legal = self.match.play(self.seat, response.message["content"])
            reward = 0.0 if legal else -self.invalid_reply_penalty
            if not self.match.over:
                await self._guarded_wait()
            if self.match.over:
                return self._done(reward, legal)
            return MessageStepResult(
                reward, False, [self._user_message()], {"legal": float(legal)}, {"reply": response.message["content"]}
            )
        except BaseException:
            self.match.abandon(self.seat)  # never leave the other seats waiting on us
            raise

    async def _guarded_wait(self) -> None:
        self.match.watch(self.seat)
        try:
            await self.match.wait_for_turn(self.seat)
        except BaseException:
            self.match.abandon(self.seat)
            raise

    def _user_message(self) -> Message:
        text = self.match.game.observe(self.seat).strip()
        return {"role": "user", "content": text or NOTHING_NEW}

    def _done(self, reward: float, legal: bool = True) -> MessageStepResult:
        score = self.match.score(self.seat)
        metrics = {
            "legal": float(legal),
            "game_reward": score,
            "win": float(score > 0),
            "loss": float(score < 0),
            "draw": float(score == 0),
            "moves": float(self.match.moves[self.seat]),
            "illegal_moves": float(self.match.illegal[self.seat]),
            "cut": float(self.match.cut_by is not None),
        }
        return MessageStepResult(reward, True, [], metrics)
