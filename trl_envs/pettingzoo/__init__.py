"""PettingZoo games (AEC and parallel APIs) as env groups: ``pettingzoo/<family>/<module>`` (e.g.
``pettingzoo/classic/tictactoe_v3``), one env per agent.

Needs ``pip install 'trl-envs[pettingzoo]'``; importing this package does not import pettingzoo (a game does).
See docs/ecosystem.md.
"""

from .game import PettingZooGame, PettingZooGameFactory
from .registry import PettingZooDatasetBuilder

__all__ = ["PettingZooDatasetBuilder", "PettingZooGame", "PettingZooGameFactory"]
