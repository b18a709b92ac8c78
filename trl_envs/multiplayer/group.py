"""Groups and datasets of turn-based games: self-play for training, a fixed opponent for evaluation.

* **Self-play** (``opponent=None``): a group of ``group_size`` envs is ``group_size / num_players`` games; envs
  ``k * n .. k * n + n - 1`` are seats ``0 .. n - 1`` of game ``k``. Every seat is the model; the game's rewards are
  the group rewards (zero-sum where the game is), and GRPO centres each seat's outcome over several games.
* **Fixed opponent** (``opponent="random"`` or a callable): every env is its own game; the model plays one seat
  (``seat``, or seats in turn ``g % num_players`` when ``None``) and the opponent all the others.

Every game of a group starts from the same seed (GRPO compares like with like); a game is made by ``make_game(seed)``,
a picklable factory supplied by the adapter.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from ..core.builtin_datasets import BuiltinDataset, BuiltinDatasetBuilder, check_number_option
from ..core.message_env import MessageTokenEnv
from ..core.renderer import Renderer
from ..core.types import TEST_SEED_OFFSET, Env, EnvGroupBuilder, Metrics, RLDataset, Trajectory
from .game import IllegalReply, Opponent, TurnGame
from .match import GameMatch
from .player import GamePlayerEnv

B = TypeVar("B", bound="GameDatasetBuilder")


class GameGroupBuilder(EnvGroupBuilder):
    """The envs of one group of games (see the module docstring).

    Args:
        make_game: ``make_game(seed) -> TurnGame``, a fresh game reset with ``seed``.
        renderer: renders the seats' conversations.
        group_size: envs in the group.
        num_players: seats per game.
        seed: the games' seed.
        opponent: ``None`` for self-play, else ``"random"`` or an :data:`~trl_envs.multiplayer.game.Opponent`.
        seat: the model's seat against a fixed opponent (``None``: env ``g`` plays seat ``g % num_players``).
        move_timeout, invalid_reply_penalty, system_prompt: see :class:`GameMatch` and :class:`GamePlayerEnv`.
        tag: the logging tag (the env's name).
    """

    def __init__(
        self,
        make_game: Callable[[int], TurnGame],
        renderer: Renderer,
        group_size: int,
        num_players: int,
        seed: int = 0,
        opponent: Opponent | str | None = None,
        seat: int | None = None,
        move_timeout: float = 120.0,
        invalid_reply_penalty: float = 0.0,
        system_prompt: str | None = None,
        tag: str = "game",
    ):
        check_group(tag, group_size, num_players, opponent, seat)
        self.make_game, self.renderer, self.group_size, self.num_players = make_game, renderer, group_size, num_players
        self.seed, self.opponent, self.seat, self.move_timeout = seed, opponent, seat, move_timeout
        self.invalid_reply_penalty, self.system_prompt, self.tag = invalid_reply_penalty, system_prompt, tag
        self._matches: list[GameMatch] = []

    async def make_envs(self) -> Sequence[Env]:
        envs: list[Env] = []
        if self.opponent is None:
            for _ in range(self.group_size // self.num_players):
                match = self._match({})
                envs += [self.make_env(match, seat) for seat in range(self.num_players)]
        else:
            for g in range(self.group_size):
                seat = self.seat if self.seat is not None else g % self.num_players
                match = self._match({s: self.opponent for s in range(self.num_players) if s != seat})
                envs.append(self.make_env(match, seat))
        return envs

    def coupled_envs(self) -> list[list[int]] | None:
        if self.opponent is not None:
            return None
        n = self.num_players
        return [list(range(k * n, (k + 1) * n)) for k in range(self.group_size // n)]

    async def compute_group_rewards(
        self, trajectory_group: list[Trajectory], env_group: Sequence[Env]
    ) -> list[tuple[float, Metrics]]:
        out = []
        for env in env_group:
            player = env.unwrapped
            if not isinstance(player, GamePlayerEnv):
                raise TypeError(f"{self.tag}: expected GamePlayerEnv envs, got {type(player).__name__}")
            score = player.match.score(player.seat)
            out.append((score, {f"seat_{player.seat}/game_reward": score}))
        return out

    async def cleanup(self) -> None:
        matches, self._matches = self._matches, []
        for match in matches:
            match.game.close()

    def logging_tags(self) -> list[str]:
        return [self.tag] if self.opponent is None else [self.tag, f"{self.tag}/vs_{_opponent_name(self.opponent)}"]

    def _match(self, opponents: dict[int, Any]) -> GameMatch:
        game = self.make_game(self.seed)
        try:
            match = GameMatch(game, opponents, self.move_timeout, self.seed)
        except BaseException:
            game.close()
            raise
        self._matches.append(match)
        return match

    def make_env(self, match: GameMatch, seat: int) -> Env:
        """The env of ``seat`` in ``match``: a :class:`GamePlayerEnv`; override to play a game's own subclass."""
        return MessageTokenEnv(
            GamePlayerEnv(match, seat, self.system_prompt, self.invalid_reply_penalty), self.renderer
        )

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_matches": []}  # live games stay with the process that plays them


def game_group_from_row(
    name: str,
    make_factory: Callable[[dict[str, Any]], Callable[[int], TurnGame]],
    renderer: Renderer,
    group_size: int,
    *,
    seed: int,
    opponent: str | None,
    seat: int | None,
    make_kwargs: dict | None,
    move_timeout: float,
    invalid_reply_penalty: float,
) -> GameGroupBuilder:
    """The group of one game row of env ``name`` (the ``from_row`` of every game adapter): ``make_factory(options)``
    is the adapter's game factory for the row's ``make_kwargs`` (a dataset's struct nulls dropped); a game made from
    ``seed`` tells the player count. A row's opponent is a name (``"random"``, ``"self"``/``None``), never an import
    path: a dataset must not make trl_envs import code."""
    options = {k: v for k, v in (make_kwargs or {}).items() if v is not None}
    if opponent not in (None, "random", "self"):
        raise ValueError(f"env {name!r}: a row's 'opponent' must be 'random' or 'self' (or null), got {opponent!r}")
    make_game = make_factory(options)
    return GameGroupBuilder(
        make_game,
        renderer,
        group_size,
        probe_game(make_game, seed).num_players,
        seed,
        None if opponent == "self" else opponent,
        seat,
        move_timeout,
        invalid_reply_penalty,
        tag=name,
    )


def probe_game(make_game: Callable[[int], TurnGame], seed: int = 0) -> TurnGame:
    """A game ``make_game(seed)`` made, then closed, to read what it is (its ``num_players``): a game that cannot start
    fails here, before any model is loaded."""
    probe = make_game(seed)
    probe.close()
    return probe


def game_kind_factory(builder_class: type[B], name: str, **fixed: Any) -> Callable[..., B]:
    """The ``factory(renderer, **options)`` of the game env kind ``name`` (the ``factory`` of every game adapter's
    ``EnvKind``): ``builder_class(renderer=renderer, name=name, **fixed, **options)``, after checking that every
    option is one of ``builder_class``'s fields a user may set (``renderer``, ``name`` and ``fixed`` are set here)."""
    internal = {"renderer", "name", *fixed}

    def factory(renderer: Renderer, **options: Any) -> B:
        check_options_known(builder_class, name, options, internal)
        return builder_class(renderer=renderer, name=name, **fixed, **options)

    return factory


def check_make_kwargs(name: str, make_kwargs: Any) -> None:
    """Raise ``ValueError`` naming env ``name`` unless its option ``make_kwargs`` (what the adapter passes to the game
    library's constructor) is a JSON object."""
    if not isinstance(make_kwargs, dict):
        raise ValueError(f"env {name!r}: option 'make_kwargs' must be a JSON object, got {make_kwargs!r}")


def import_function(name: str, option: str, ref: str, signature: str) -> Callable[..., Any]:
    """The function ``"package.module:function"`` an option of env ``name`` names; ``ValueError`` naming the env, the
    option and what is wrong (not importable, not callable) otherwise."""
    import importlib

    module_name, _, attr = ref.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"env {name!r}: option {option!r}: cannot import {ref!r}: {e}") from e
    if not callable(found):
        raise ValueError(f"env {name!r}: option {option!r}: {ref!r} is not a function {signature}")
    return found


def resolve_opponent(name: str, option: str, value: Any) -> Opponent | str | None:
    """An ``opponent`` / ``test_opponent`` option as the group takes it: ``None`` or ``"self"`` (self-play),
    ``"random"``, a callable, or ``"package.module:function"`` imported (a command line cannot pass a callable);
    ``ValueError`` naming ``name`` and ``option`` otherwise."""
    if value is None or value == "random" or callable(value):
        return value
    if value == "self":
        return None
    if isinstance(value, str) and ":" in value:
        return import_function(name, option, value, "(text, rng) -> reply")
    raise ValueError(
        f"env {name!r}: option {option!r} must be 'random', 'self' (or null: self-play), or an opponent function "
        f"'package.module:function' taking (text, rng) and returning the reply; got {value!r}"
    )


def check_options_known(builder_class: type, name: str, options: dict[str, Any], internal: set[str]) -> None:
    """Raise ``ValueError`` naming ``name`` and the option for an ``--env_kwargs`` key ``builder_class`` (a dataclass)
    does not take; ``internal`` are fields the adapter sets itself."""
    from dataclasses import fields

    known = sorted(f.name for f in fields(builder_class) if f.init and f.name not in internal)
    for key in options:
        if key not in known:
            raise ValueError(f"env {name!r}: no option {key!r}; its options are {known}")


def check_group(name: str, group_size: int, num_players: int, opponent: Any, seat: int | None) -> None:
    """Raise ``ValueError`` naming ``name`` for a group that cannot be played."""
    if num_players < 1:
        raise ValueError(f"env {name!r}: num_players must be >= 1, got {num_players}")
    if opponent is None and (group_size < num_players or group_size % num_players):
        raise ValueError(
            f"env {name!r}: in self-play a group is group_size / num_players games, so group_size "
            f"(num_generations) must be a multiple of num_players={num_players}; got {group_size} (or play a "
            "fixed opponent: option opponent='random')"
        )
    if seat is not None and not 0 <= seat < num_players:
        raise ValueError(f"env {name!r}: option 'seat' must be in 0..{num_players - 1}, got {seat!r}")


def _opponent_name(opponent: Any) -> str:
    return opponent if isinstance(opponent, str) else getattr(opponent, "__name__", type(opponent).__name__)


class GameDataset(BuiltinDataset):
    """``num_batches`` batches of ``batch_size`` :class:`GameGroupBuilder` s; group ``j`` of batch ``i`` plays from a
    seed fixed by ``seed``, ``i`` and ``j`` (reproducible, distinct across groups)."""

    def __init__(
        self,
        renderer: Renderer,
        batch_size: int,
        group_size: int,
        num_batches: int,
        make_game: Callable[[int], TurnGame],
        num_players: int,
        seed: int = 0,
        **group_options: Any,
    ):
        super().__init__(renderer, batch_size, group_size, num_batches)
        self.make_game, self.num_players, self.seed, self.group_options = make_game, num_players, seed, group_options

    def make_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        rng = random.Random(f"{self.group_options.get('tag', 'game')}/{self.seed}/{index}")
        return [
            GameGroupBuilder(
                self.make_game,
                self.renderer,
                self.group_size,
                self.num_players,
                rng.randrange(2**31),
                **self.group_options,
            )
            for _ in range(self.batch_size)
        ]


@dataclass
class GameDatasetBuilder(BuiltinDatasetBuilder):
    """Training games (self-play, or against ``opponent``) and a test set against ``test_opponent``.

    An opponent is ``"random"`` (the game's :meth:`~trl_envs.multiplayer.game.TurnGame.random_reply`), ``None`` /
    ``"self"`` (self-play), a callable ``(text, rng) -> reply``, or its import path ``"package.module:function"``
    (what a command line passes). ``test_opponent`` left out is ``"random"`` where the game names its legal moves and
    self-play elsewhere (the test split then measures the model's play, legal moves and finished games).

    Subclasses (one per adapter) set ``env_name`` on the instance and supply :meth:`game_factory`.
    """

    env_name: ClassVar[str] = "game"

    group_size: int = 4
    num_players: int = 2
    opponent: str | None = None
    test_opponent: str | None = None
    seat: int | None = None
    move_timeout: float = 120.0
    invalid_reply_penalty: float = 0.0
    system_prompt: str | None = None
    name: str = field(default="game", kw_only=True)

    def check_options(self) -> None:
        self.env_name = self.name  # errors name the env the user asked for
        super().check_options()
        self.opponent = resolve_opponent(self.name, "opponent", self.opponent)
        self.test_opponent = resolve_opponent(self.name, "test_opponent", self.test_opponent)
        if "random" in (self.opponent, self.test_opponent) or self.test_opponent is None:
            random_plays = self.random_opponent_plays()
            for option in ("opponent", "test_opponent"):
                if getattr(self, option) == "random" and not random_plays:
                    raise ValueError(
                        f"env {self.name!r}: option {option!r} is 'random', but the game names no moves to draw "
                        "from; name an opponent function instead: 'package.module:function' taking (text, rng)"
                    )
            if self.test_opponent is None:  # the default: 'random' where the game names its moves, else self-play
                self.test_opponent = "random" if random_plays else None
        check_number_option(self.name, "move_timeout", self.move_timeout, positive=True)
        check_number_option(self.name, "invalid_reply_penalty", self.invalid_reply_penalty)
        check_group(self.name, self.group_size, self.num_players, self.opponent, self.seat)

    def game_factory(self) -> Callable[[int], TurnGame]:
        raise NotImplementedError(f"{type(self).__name__} must define game_factory()")

    def random_opponent_plays(self) -> bool:
        """Whether the ``"random"`` opponent can move in this game: the game names a legal move at its start."""
        game = self.game_factory()(self.test_seed)
        try:
            seat = game.to_move()
            if seat is None:
                return True
            game.observe(seat)
            game.random_reply(seat, random.Random(0))
            return True
        except IllegalReply:
            return False
        finally:
            game.close()

    def dataset(self, num_batches: int, seed: int, opponent: Any = None) -> RLDataset:
        return GameDataset(
            self.renderer,
            self.batch_size,
            self.group_size,
            num_batches,
            self.game_factory(),
            self.num_players,
            seed,
            opponent=opponent,
            seat=self.seat,
            move_timeout=self.move_timeout,
            invalid_reply_penalty=self.invalid_reply_penalty,
            system_prompt=self.system_prompt,
            tag=self.name,
        )

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        return (
            self.dataset(self.num_batches, self.train_seed, self.opponent),
            self.dataset(self.num_test_batches, self.test_seed + TEST_SEED_OFFSET, self.test_opponent),
        )
