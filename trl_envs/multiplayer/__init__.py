"""Turn-based n-player games from other libraries (TextArena, PettingZoo) as env groups.

* :class:`~trl_envs.multiplayer.game.TurnGame`: what an adapter implements for one game (whose turn it is, the new
  text a player sees, playing a player's reply, the final rewards);
* :class:`~trl_envs.multiplayer.match.GameMatch`: one game shared by the player envs of a group, and how they wait on
  each other without stalling the batched sampler (:func:`trl_envs.rollout.batching.parked`);
* :class:`~trl_envs.multiplayer.player.GamePlayerEnv`: one seat of a match as a
  :class:`~trl_envs.core.message_env.MessageEnv`;
* :class:`~trl_envs.multiplayer.group.GameGroupBuilder` / :class:`~trl_envs.multiplayer.group.GameDataset`: self-play
  groups (every seat is the model, the game's rewards are the group rewards) or groups against a fixed opponent.

Imports no game library; the adapters (:mod:`trl_envs.textarena`, :mod:`trl_envs.pettingzoo`) do. Design:
docs/ecosystem.md.
"""

from .game import IllegalReply, Opponent, TurnGame
from .group import GameDataset, GameDatasetBuilder, GameGroupBuilder
from .match import GameMatch
from .player import GamePlayerEnv

__all__ = [
    "GameDataset",
    "GameDatasetBuilder",
    "GameGroupBuilder",
    "GameMatch",
    "GamePlayerEnv",
    "IllegalReply",
    "Opponent",
    "TurnGame",
]
