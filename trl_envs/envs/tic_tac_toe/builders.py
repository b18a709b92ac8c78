"""Groups and datasets of tic-tac-toe: self-play groups for training, groups against a scripted opponent for
evaluation.

A self-play group of ``group_size`` envs is ``group_size / 2`` games, each played by two envs of the group (X and
O), so GRPO centres each player's outcome over several games and both sides. The group reward of a player is its
game's outcome (+1/0/-1): zero-sum within every game.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ...core.builtin_datasets import BuiltinDataset, BuiltinDatasetBuilder, check_number_option
from ...core.message_env import MessageTokenEnv
from ...core.renderer import Renderer
from ...core.types import TEST_SEED_OFFSET, Env, EnvGroupBuilder, RLDataset
from ...multiplayer.group import GameGroupBuilder
from ...multiplayer.match import GameMatch
from .envs import TicTacToePlayerEnv, TicTacToeVsOpponentEnv
from .game import MARKS, TicTacToeGame
from .opponents import OPPONENTS, make_opponent


class TicTacToeSelfPlayGroupBuilder(GameGroupBuilder):
    """``num_games`` self-play games; envs ``2k`` and ``2k + 1`` are X and O of game ``k``.

    A :class:`~trl_envs.multiplayer.group.GameGroupBuilder` of :class:`~.game.TicTacToeGame` s: the players of a
    game are retried together, and each player's group reward is its game's outcome (zero-sum).

    Args:
        renderer: renders the players' conversations.
        num_games: games per group (the group has ``2 * num_games`` envs).
        illegal_move_penalty: step reward ``-illegal_move_penalty`` for an illegal or unreadable move (which also
            loses the game).
        move_timeout: seconds a player waits for its opponent's move before failing with ``OpponentTimeout``.
    """

    def __init__(
        self, renderer: Renderer, num_games: int, illegal_move_penalty: float = 0.5, move_timeout: float = 120.0
    ):
        if num_games < 1:
            raise ValueError(f"TicTacToeSelfPlayGroupBuilder: num_games must be >= 1, got {num_games}")
        super().__init__(
            TicTacToeGame,
            renderer,
            2 * num_games,
            2,
            move_timeout=move_timeout,
            invalid_reply_penalty=illegal_move_penalty,
            tag="tic_tac_toe",
        )
        self.num_games, self.illegal_move_penalty = num_games, illegal_move_penalty

    def make_env(self, match: GameMatch, seat: int) -> Env:
        return MessageTokenEnv(TicTacToePlayerEnv(match, MARKS[seat], self.illegal_move_penalty), self.renderer)


class TicTacToeVsOpponentGroupBuilder(EnvGroupBuilder):
    """``group_size`` games of the model (playing ``mark``) against a scripted opponent (``"random"`` or
    ``"perfect"``); game ``i`` seeds the opponent with ``seed + i``."""

    def __init__(
        self,
        renderer: Renderer,
        group_size: int,
        opponent: str = "random",
        mark: str = "X",
        seed: int = 0,
        illegal_move_penalty: float = 0.5,
    ):
        if mark not in ("X", "O"):
            raise ValueError(f"TicTacToeVsOpponentGroupBuilder: mark must be 'X' or 'O', got {mark!r}")
        make_opponent(opponent)  # fail early on an unknown name
        self.renderer, self.group_size, self.opponent, self.mark = renderer, group_size, opponent, mark
        self.seed, self.illegal_move_penalty = seed, illegal_move_penalty

    async def make_envs(self) -> Sequence[Env]:
        return [
            MessageTokenEnv(
                TicTacToeVsOpponentEnv(
                    make_opponent(self.opponent),
                    self.mark,
                    self.seed + i,  # type: ignore[arg-type]
                    self.illegal_move_penalty,
                ),
                self.renderer,
            )
            for i in range(self.group_size)
        ]

    def logging_tags(self) -> list[str]:
        return [f"tic_tac_toe_vs_{self.opponent}", f"tic_tac_toe_vs_{self.opponent}_as_{self.mark}"]


class TicTacToeSelfPlayDataset(BuiltinDataset):
    """``num_batches`` batches of ``batch_size`` self-play groups of ``group_size`` envs (``group_size / 2`` games)."""

    def __init__(
        self,
        renderer: Renderer,
        batch_size: int,
        group_size: int,
        num_batches: int,
        illegal_move_penalty: float = 0.5,
        move_timeout: float = 120.0,
    ):
        if group_size < 2 or group_size % 2:
            raise ValueError(
                f"tic_tac_toe: group_size (num_generations) must be even and >= 2 — a group is "
                f"group_size / 2 games of two players — got {group_size}"
            )
        super().__init__(renderer, batch_size, group_size, num_batches)
        self.illegal_move_penalty, self.move_timeout = illegal_move_penalty, move_timeout

    def make_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        return [
            TicTacToeSelfPlayGroupBuilder(
                self.renderer, self.group_size // 2, self.illegal_move_penalty, self.move_timeout
            )
            for _ in range(self.batch_size)
        ]


class TicTacToeVsOpponentDataset(BuiltinDataset):
    """Evaluation games against a scripted opponent; groups alternate the model's mark (X, O, X, ...), and every
    game's opponent seed is fixed by ``seed``, the batch and the group, so evaluations are reproducible."""

    def __init__(
        self,
        renderer: Renderer,
        batch_size: int,
        group_size: int,
        num_batches: int,
        opponent: str = "random",
        seed: int = 0,
        illegal_move_penalty: float = 0.5,
    ):
        make_opponent(opponent)
        super().__init__(renderer, batch_size, group_size, num_batches)
        self.opponent, self.seed, self.illegal_move_penalty = opponent, seed, illegal_move_penalty

    def make_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        rng = random.Random(f"tic_tac_toe/{self.opponent}/{self.seed}/{index}")
        return [
            TicTacToeVsOpponentGroupBuilder(
                self.renderer,
                self.group_size,
                self.opponent,
                "XO"[g % 2],
                rng.randrange(2**31),
                self.illegal_move_penalty,
            )
            for g in range(self.batch_size)
        ]


@dataclass
class TicTacToeDatasetBuilder(BuiltinDatasetBuilder):
    """Self-play: two players of one group play each game; zero-sum group rewards.

    Self-play training games and a test set against ``test_opponent`` (``"random"`` or ``"perfect"``).
    """

    env_name: ClassVar[str] = "tic_tac_toe"

    group_size: int = 8
    test_opponent: str = "random"
    illegal_move_penalty: float = 0.5
    move_timeout: float = 120.0

    def check_options(self) -> None:
        super().check_options()
        if not isinstance(self.test_opponent, str) or self.test_opponent not in OPPONENTS:
            raise ValueError(
                f"env 'tic_tac_toe': option 'test_opponent' must be one of {sorted(OPPONENTS)}, got "
                f"{self.test_opponent!r}"
            )
        check_number_option(self.env_name, "illegal_move_penalty", self.illegal_move_penalty)
        check_number_option(self.env_name, "move_timeout", self.move_timeout, positive=True)

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        train = TicTacToeSelfPlayDataset(
            self.renderer,
            self.batch_size,
            self.group_size,
            self.num_batches,
            self.illegal_move_penalty,
            self.move_timeout,
        )
        test = TicTacToeVsOpponentDataset(
            self.renderer,
            self.batch_size,
            self.group_size,
            self.num_test_batches,
            self.test_opponent,
            self.test_seed + TEST_SEED_OFFSET,
            self.illegal_move_penalty,
        )
        return train, test
