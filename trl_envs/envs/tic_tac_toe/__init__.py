"""``tic_tac_toe``: self-play (two envs of a group play one game) and evaluation against scripted opponents.

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
from .match import OpponentAbandoned, OpponentTimeout, TicTacToeMatch
from .opponents import PerfectOpponent, RandomOpponent, make_opponent

__all__ = [
    "OpponentAbandoned",
    "OpponentTimeout",
    "PerfectOpponent",
    "RandomOpponent",
    "TicTacToeDatasetBuilder",
    "TicTacToeMatch",
    "TicTacToePlayerEnv",
    "TicTacToeSelfPlayDataset",
    "TicTacToeSelfPlayGroupBuilder",
    "TicTacToeVsOpponentDataset",
    "TicTacToeVsOpponentEnv",
    "TicTacToeVsOpponentGroupBuilder",
    "make_opponent",
]
