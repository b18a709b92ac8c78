"""``tic_tac_toe``: self-play (two envs of a group play one game) and evaluation against scripted opponents.

The game (:class:`TicTacToeGame`) is a :class:`~trl_envs.multiplayer.game.TurnGame`, played through
:mod:`trl_envs.multiplayer`'s match, player env and group builder.

See docs/multi_agent.md for the design: how players wait on each other without stalling the batched sampler, what
happens when one of them fails, and how rewards are made zero-sum.
"""

from .builders import (
    TicTacToeDatasetBuilder,
    TicTacToeSelfPlayDataset,
    TicTacToeSelfPlayGroupBuilder,
    TicTacToeVsOpponentDataset,
    TicTacToeVsOpponentGroupBuilder,
)
from .envs import TicTacToePlayerEnv, TicTacToeVsOpponentEnv
from .game import TicTacToeGame
from .match import OpponentAbandoned, OpponentTimeout, TicTacToeMatch
from .opponents import PerfectOpponent, RandomOpponent, TextOpponent, make_opponent

__all__ = [
    "OpponentAbandoned",
    "OpponentTimeout",
    "PerfectOpponent",
    "RandomOpponent",
    "TextOpponent",
    "TicTacToeDatasetBuilder",
    "TicTacToeGame",
    "TicTacToeMatch",
    "TicTacToePlayerEnv",
    "TicTacToeSelfPlayDataset",
    "TicTacToeSelfPlayGroupBuilder",
    "TicTacToeVsOpponentDataset",
    "TicTacToeVsOpponentEnv",
    "TicTacToeVsOpponentGroupBuilder",
    "make_opponent",
]
