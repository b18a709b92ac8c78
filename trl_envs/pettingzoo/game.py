"""A PettingZoo game as a :class:`~trl_envs.multiplayer.game.TurnGame`.

The game is ``pettingzoo.<family>.<module>``: its AEC ``env(**make_kwargs)``, or with ``api="parallel"`` its
``parallel_env(**make_kwargs)`` played through PettingZoo's own ``parallel_to_aec`` (the agents of a round move in
turn; the round's step happens once all have moved). It is reset with ``seed``; seats are ``possible_agents`` in
order. The agent loop is PettingZoo's: an agent's return is the sum of the cumulative rewards ``last()`` reports
each time it is selected, and terminated or truncated agents are stepped with ``None``.

Replies: the last integer of the reply is the action (:func:`~trl_envs.pettingzoo.text.read_action`). A number the
action mask forbids goes to the game, which rules on it as it says (classic games: ``TerminateIllegalWrapper``, the
mover loses with -1). A reply without a number, or outside the action space, cannot be given to the game: it ends
the game as classic games end one on an illegal move: the mover gets ``illegal_reward``, the others 0.

pettingzoo is imported when a game is made, never by ``import trl_envs``.
"""

from __future__ import annotations

import importlib
import random
from dataclasses import dataclass, field
from typing import Any, Literal

from ..multiplayer.game import IllegalReply, TurnGame
from .text import Formatter, read_action, resolve_formatter, split_observation

Api = Literal["aec", "parallel"]


class MissingGameLibrary(ImportError, ValueError):
    """A game needs a package that is not installed; the message is the line that installs it."""


GAME_PACKAGES: dict[str, str] = {"chess": "chess", "rlcard": "rlcard", "shimmy": "'shimmy[openspiel]'"}
"""What to ``pip install`` for a module a PettingZoo game imports (by the missing module's top-level name)."""


def missing_package(game: str) -> str | None:
    """The ``pip install`` argument of the package ``game`` needs and lacks, ``None`` when it imports."""
    try:
        import_game_module(game)
    except MissingGameLibrary as e:
        return e.name
    return None


def import_game_module(game: str):
    """``pettingzoo.<family>.<module>`` for ``game = "<family>/<module>"``; ``ValueError`` naming it otherwise, and
    :class:`MissingGameLibrary` (its ``name``: what to pip install) when a package the game needs is missing."""
    try:
        import pettingzoo  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "PettingZoo games need pettingzoo: pip install 'trl-envs[pettingzoo]' (docs/ecosystem.md)"
        ) from e
    family, _, module = game.partition("/")
    if not family or not module or "/" in module:
        raise ValueError(f"pettingzoo game {game!r}: expected '<family>/<module>', e.g. 'classic/tictactoe_v3'")
    try:
        return importlib.import_module(f"pettingzoo.{family}.{module}")
    except ImportError as e:
        missing = (e.name or "").split(".")[0]
        if not missing or missing == "pettingzoo":
            missing = next((m for m in GAME_PACKAGES if m in str(e).lower()), missing or "?")
        package = GAME_PACKAGES.get(missing, missing)
        raise MissingGameLibrary(
            f"env 'pettingzoo/{game}' needs the {missing!r} package, which is not installed: pip install {package}",
            name=package,
        ) from None


class PettingZooGame(TurnGame):
    """One PettingZoo game (see the module docstring).

    Args:
        game: ``"<family>/<module>"``, e.g. ``"classic/tictactoe_v3"``.
        seed: passed to ``reset(seed=seed)``.
        make_kwargs: keyword arguments of ``env`` / ``parallel_env``.
        api: ``"aec"`` or ``"parallel"``.
        illegal_reward: the reward of a reply that is not an action (the others get 0).
        formatter: ``(agent, observation, legal actions) -> text``, or its name in
            :data:`~trl_envs.pettingzoo.text.FORMATTERS` or import path ``"package.module:function"`` (default: the
            game's, :data:`~trl_envs.pettingzoo.text.GAME_FORMATTERS`).
    """

    def __init__(
        self,
        game: str,
        seed: int = 0,
        make_kwargs: dict[str, Any] | None = None,
        api: Api = "aec",
        illegal_reward: float = -1.0,
        formatter: Formatter | str | None = None,
    ):
        self.name = f"pettingzoo/{game}"
        module = import_game_module(game)
        try:
            if api == "parallel":
                from pettingzoo.utils.conversions import parallel_to_aec

                self.env = parallel_to_aec(module.parallel_env(**(make_kwargs or {})))
            elif api == "aec":
                self.env = module.env(**(make_kwargs or {}))
            else:
                raise ValueError(f"api must be 'aec' or 'parallel', got {api!r}")
            self.env.reset(seed=seed)
        except Exception as e:
            raise ValueError(
                f"env {self.name!r}: pettingzoo could not start the game (api={api!r}, options "
                f"{make_kwargs or {}}): {type(e).__name__}: {e}"
            ) from e
        self.agents = list(self.env.possible_agents)
        self.num_players = len(self.agents)
        for agent in self.agents:
            kind = type(self.env.action_space(agent)).__name__
            if kind != "Discrete":
                raise ValueError(
                    f"env {self.name!r}: agent {agent!r} has a {kind} action space; text replies are "
                    "read as one action number, so only Discrete action spaces are supported"
                )
        self.illegal_reward = illegal_reward
        self.formatter = resolve_formatter(self.name, formatter, game)
        self.returns = dict.fromkeys(self.agents, 0.0)
        self.forfeited_by: str | None = None
        self._log: list[tuple[str, int | str]] = []
        self._seen = dict.fromkeys(self.agents, 0)
        self._legal: dict[str, list[int] | None] = {}
        self._skip_dead()

    def to_move(self) -> int | None:
        if self.forfeited_by is not None or not self.env.agents:
            return None
        return self.agents.index(self.env.agent_selection)

    def observe(self, seat: int) -> str:
        agent = self.agents[seat]
        news = [f"{a} played {action}." for a, action in self._log[self._seen[agent] :] if a != agent]
        self._seen[agent] = len(self._log)
        observation, legal = split_observation(self.env.observe(agent))
        if legal is None:  # no action mask: every action of the (Discrete) space
            legal = list(range(int(self.env.action_space(agent).n)))
        self._legal[agent] = legal
        return "\n".join(news + [self.formatter(agent, observation, legal)])

    def play(self, seat: int, reply: str) -> bool:
        agent = self.agents[seat]
        action = read_action(reply)
        if action is None or not self.env.action_space(agent).contains(action):
            self.forfeited_by = agent  # no action to give the game: it ends, as on an illegal move
            self._log.append((agent, "no action (the reply had no action number) and lost"))
            for a in self.agents:
                self.returns[a] += self.illegal_reward if a == agent else 0.0
            return False
        _, legal = split_observation(self.env.observe(agent))
        self._collect(agent)
        self.env.step(action)
        self._log.append((agent, action))
        self._skip_dead()
        return legal is None or action in legal

    def rewards(self) -> dict[int, float]:
        return {i: self.returns[a] for i, a in enumerate(self.agents)}

    def random_reply(self, seat: int, rng: random.Random) -> str:
        agent = self.agents[seat]
        legal = self._legal.get(agent)
        if legal is None:
            legal = list(range(int(self.env.action_space(agent).n)))
        if not legal:
            raise IllegalReply(f"{self.name}: {agent} has no legal action")
        return str(rng.choice(legal))

    def close(self) -> None:
        self.env.close()

    def _collect(self, agent: str) -> None:
        self.returns[agent] += float(self.env._cumulative_rewards.get(agent, 0.0))

    def _skip_dead(self) -> None:
        """Step terminated / truncated agents with ``None`` (collecting their last rewards) until a live agent is to
        move or none is left."""
        while self.env.agents:
            agent = self.env.agent_selection
            if not (self.env.terminations.get(agent) or self.env.truncations.get(agent)):
                return
            self._collect(agent)
            self.env.step(None)


@dataclass(frozen=True)
class PettingZooGameFactory:
    """``factory(seed) -> PettingZooGame``: picklable, so groups of it are."""

    game: str
    make_kwargs: dict[str, Any] = field(default_factory=dict)
    api: Api = "aec"
    illegal_reward: float = -1.0
    formatter: Formatter | str | None = None

    def __call__(self, seed: int) -> PettingZooGame:
        return PettingZooGame(self.game, seed, self.make_kwargs, self.api, self.illegal_reward, self.formatter)
