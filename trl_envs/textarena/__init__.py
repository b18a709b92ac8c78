"""TextArena games as env groups: ``textarena/<env id>`` (e.g. ``textarena/TicTacToe-v0``), one env per player.

Needs ``pip install 'trl-envs[textarena]'``; importing this package does not import textarena (a game does).
See docs/ecosystem.md.
"""

from .game import TextArenaGame, TextArenaGameFactory
from .registry import TextArenaDatasetBuilder

__all__ = ["TextArenaDatasetBuilder", "TextArenaGame", "TextArenaGameFactory"]
