"""Any Gymnasium environment as a trl_envs :class:`~trl_envs.core.types.Env`: the observation rendered to text, the
action parsed from the model's reply.

One :class:`GymEnv` is one episode of a Gymnasium env (made with ``gymnasium.make(id)``, by a factory, or given as
an instance), reset with ``seed``. Each turn the model sees the state as text (:mod:`trl_envs.gym.text`), replies
with an action, and the Gymnasium env steps once:

* the step reward is the Gymnasium reward (times ``reward_scale``), plus ``invalid_action_penalty`` when the reply
  was not a legal action;
* ``terminated`` or ``truncated`` ends the episode (``max_episode_steps`` sets the time limit, as in
  ``gymnasium.make``);
* an unparsable reply never crashes the rollout: with ``invalid_action="default"`` the penalty is added and
  ``default_action`` is played; with ``invalid_action="end"`` the episode ends with the penalty.

Two ways to show the state (``mode``):

* ``"current_state"`` (default): each turn is a fresh prompt holding only the current state. Observations do not
  extend each other (``observations_extend = False``), so each turn becomes its own training row (the trainer's
  per-turn rows). Prompts stay short however long the episode is.
* ``"full_history"``: each state is appended to the conversation as a new user message, token-exactly
  (:meth:`Renderer.extend_observation`), and the episode trains as one sequence. The context grows with every
  step; ``max_context_tokens`` ends the episode (as truncated) before it outgrows the model.

:class:`GymGroupBuilder` makes ``group_size`` episodes with the same seed (GRPO compares like with like) and
:class:`GymDataset` batches of them with distinct seeds. Gymnasium is imported only when an env is made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core.renderer import Message, Renderer
from ..core.types import (
    TEST_SEED_OFFSET,
    Action,
    Env,
    EnvGroupBuilder,
    Observation,
    RLDataset,
    RLDatasetBuilder,
    StepResult,
    StopCondition,
)
from .text import ActionParseError, ActionParser, ObservationFormatter
from .text import default_action as space_default_action

GymMode = Literal["current_state", "full_history"]
InvalidActionMode = Literal["default", "end"]


def _import_gymnasium():
    try:
        import gymnasium
    except ImportError as e:  # the core package does not need gymnasium
        raise ImportError("GymEnv needs gymnasium: pip install 'trl-envs[gym]' (or pip install gymnasium)") from e
    return gymnasium


def _is_gym_instance(env: Any) -> bool:
    return hasattr(env, "step") and hasattr(env, "reset") and hasattr(env, "action_space")


def _make_gym(env: Any, make_kwargs: dict[str, Any], max_episode_steps: int | None) -> tuple[Any, bool]:
    """The Gymnasium env to play, and whether we own it (and so close it)."""
    if isinstance(env, str):
        gymnasium = _import_gymnasium()
        kwargs = dict(make_kwargs)
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps
        return gymnasium.make(env, **kwargs), True
    if _is_gym_instance(env):
        instance, owned = env, False
    elif callable(env):
        instance, owned = env(**make_kwargs), True
        if not _is_gym_instance(instance):
            raise TypeError(
                f"GymEnv: the env factory {env!r} returned {type(instance).__name__}, not a Gymnasium "
                "env (needs reset, step, action_space)"
            )
    else:
        raise TypeError(
            f"GymEnv: env must be a Gymnasium id, a Gymnasium env or a factory returning one; got {type(env).__name__}"
        )
    if max_episode_steps is not None:
        instance = _import_gymnasium().wrappers.TimeLimit(instance, max_episode_steps=max_episode_steps)
    return instance, owned


def gym_env_name(env: Any) -> str:
    """A readable name for ``env`` (an id, an instance or a factory), used in errors and logging tags."""
    if isinstance(env, str):
        return env
    spec = getattr(env, "spec", None)
    if spec is not None and getattr(spec, "id", None):
        return spec.id
    if _is_gym_instance(env):
        return type(getattr(env, "unwrapped", env)).__name__
    return getattr(env, "__name__", type(env).__name__)


class GymEnv(Env):
    """One episode of a Gymnasium env, played by a language model in text.

    Args:
        env: a Gymnasium id (``"CartPole-v1"``, made with ``gymnasium.make(env, **make_kwargs)``), a Gymnasium env
            instance (used as is, not closed), or a factory ``(**make_kwargs) -> gymnasium.Env``.
        renderer: renders the prompts and parses replies.
        seed: passed to ``reset(seed=seed)`` (and to ``action_space.seed`` for ``default_action="random"``); the
            same seed and the same replies give the same episode.
        mode: ``"current_state"`` (a fresh prompt per turn, per-turn training rows) or ``"full_history"`` (the
            conversation grows token-exactly). See the module docstring.
        formatter: ``(observation, info) -> str``, the text of a state. Default: :class:`ObservationFormatter`
            built from ``observation_names``, ``action_names``, ``instructions``, ``precision``.
        action_parser: ``(text) -> action``, raising :class:`~trl_envs.gym.text.ActionParseError` (or
            ``ValueError``) for an illegal reply. Default: :class:`ActionParser` with ``action_names``.
        observation_names, action_names, instructions, precision: options of the default formatter / parser.
        system_prompt: an optional system message before each prompt.
        invalid_action: ``"default"`` plays ``default_action`` after an unparsable reply; ``"end"`` ends the episode.
        invalid_action_penalty: added to the step reward of an unparsable reply (usually negative).
        default_action: the action played for an unparsable reply: ``None`` (the space's default, see
            :func:`~trl_envs.gym.text.default_action`), ``"random"`` (sampled from the seeded action space) or an
            action.
        reward_scale: the Gymnasium reward is multiplied by this (the penalty is not).
        max_episode_steps: time limit, as ``gymnasium.make(..., max_episode_steps=)``; ``None`` keeps the env's.
        max_context_tokens: ``full_history`` only: end the episode (truncated, metric ``context_full``) when the next
            observation would be longer than this. Set it to the model's context length.
        make_kwargs: keyword arguments for ``gymnasium.make`` or the factory.

    Metrics: ``parse_ok`` every step; on the last step ``episode_return`` (sum of Gymnasium rewards, unscaled, no
    penalties), ``episode_length`` (env steps), ``terminated``, ``truncated``, ``invalid_actions`` and, in
    ``full_history``, ``context_full``. Each transition's ``logs`` hold ``state`` (the text shown), ``reply`` and,
    when the env stepped, ``env_reward``.
    """

    def __init__(
        self,
        env: Any,
        renderer: Renderer,
        *,
        seed: int | None = None,
        mode: GymMode = "current_state",
        formatter: Callable[[Any, dict], str] | None = None,
        action_parser: Callable[[str], Any] | None = None,
        observation_names: Sequence[str] | None = None,
        action_names: Sequence[str] | None = None,
        instructions: str = "",
        precision: int = 2,
        system_prompt: str | None = None,
        invalid_action: InvalidActionMode = "default",
        invalid_action_penalty: float = -1.0,
        default_action: Any = None,
        reward_scale: float = 1.0,
        max_episode_steps: int | None = None,
        max_context_tokens: int | None = None,
        make_kwargs: dict[str, Any] | None = None,
    ):
        self.name = gym_env_name(env)
        if mode not in ("current_state", "full_history"):
            raise ValueError(f"GymEnv({self.name}): mode must be 'current_state' or 'full_history', got {mode!r}")
        if invalid_action not in ("default", "end"):
            raise ValueError(f"GymEnv({self.name}): invalid_action must be 'default' or 'end', got {invalid_action!r}")
        if max_context_tokens is not None and mode != "full_history":
            raise ValueError(f"GymEnv({self.name}): max_context_tokens only applies to mode='full_history'")
        self.gym, self._owns_gym = _make_gym(env, dict(make_kwargs or {}), max_episode_steps)
        self.renderer, self.seed, self.mode = renderer, seed, mode
        self.observations_extend = mode == "full_history"  # instance attribute: read by the rollout
        self.invalid_action, self.invalid_action_penalty = invalid_action, float(invalid_action_penalty)
        self.reward_scale, self.max_context_tokens, self.system_prompt = (
            float(reward_scale),
            max_context_tokens,
            system_prompt,
        )
        try:
            self.formatter = formatter or ObservationFormatter(
                self.gym.observation_space,
                self.gym.action_space,
                observation_names=observation_names,
                action_names=action_names,
                precision=precision,
                instructions=instructions,
            )
            self.action_parser = action_parser or ActionParser(self.gym.action_space, action_names=action_names)
            if _is_random(default_action):
                self._default_action = None  # sampled from the seeded action space at each invalid reply
            elif default_action is None:
                self._default_action = space_default_action(self.gym.action_space)
            else:
                self._default_action = default_action
        except (TypeError, ValueError) as e:
            self.close()
            raise type(e)(f"GymEnv({self.name}): {e}") from None
        if self._default_action is not None and not self.gym.action_space.contains(self._default_action):
            self.close()
            raise ValueError(
                f"GymEnv({self.name}): default_action {self._default_action!r} is not in the action space "
                f"{self.gym.action_space!r}"
            )
        self._ob: Observation | None = None
        self._state_text = ""
        self._done = False
        self.steps = 0
        self.episode_return = 0.0
        self.invalid_actions = 0

    # -- the Env contract ------------------------------------------------------------------------------------

    async def initial_observation(self) -> tuple[Observation, StopCondition]:
        if self._ob is not None:
            raise RuntimeError(f"GymEnv({self.name}): initial_observation() called twice; a GymEnv is one episode")
        observation, info = self.gym.reset(seed=self.seed)
        if self.seed is not None:
            self.gym.action_space.seed(self.seed)
        self._state_text = self.formatter(observation, info)
        self._ob = self.renderer.build_generation_prompt(self._prompt_messages(self._state_text))
        return self._ob, self.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: dict[str, Any] | None = None) -> StepResult:
        if self._ob is None:
            raise RuntimeError(f"GymEnv({self.name}): step() called before initial_observation()")
        if self._done:
            raise RuntimeError(f"GymEnv({self.name}): step() called after the episode ended")
        response = self.renderer.parse_response(action)
        reply = response.message["content"]
        logs: dict[str, Any] = {"state": self._state_text, "reply": reply}
        gym_action, error = self._parse(reply, response.ok)
        if error is not None:
            self.invalid_actions += 1
            logs["invalid_action"] = error
            if self.invalid_action == "end":
                return self._finish(
                    action, self.invalid_action_penalty, {"parse_ok": 0.0}, logs, terminated=False, truncated=False
                )
            gym_action = self._fallback_action()
        observation, env_reward, terminated, truncated, info = self.gym.step(gym_action)
        env_reward = float(env_reward)
        self.steps += 1
        self.episode_return += env_reward
        logs["env_reward"] = env_reward
        reward = env_reward * self.reward_scale + (self.invalid_action_penalty if error is not None else 0.0)
        metrics = {"parse_ok": float(error is None)}
        if terminated or truncated:
            return self._finish(action, reward, metrics, logs, terminated=bool(terminated), truncated=bool(truncated))
        self._state_text = self.formatter(observation, info)
        if self.mode == "current_state":
            next_ob = self.renderer.build_generation_prompt(self._prompt_messages(self._state_text))
        else:
            note = "" if error is None else f"Invalid action ({error}); played {self._describe(gym_action)}.\n"
            next_ob = self.renderer.extend_observation(
                self._ob, action, [{"role": "user", "content": note + self._state_text}]
            )
            if self.max_context_tokens is not None and len(next_ob) > self.max_context_tokens:
                return self._finish(action, reward, metrics, logs, terminated=False, truncated=True, context_full=True)
        self._ob = next_ob
        return StepResult(reward, False, next_ob, self.renderer.get_stop_sequences(), metrics, logs)

    # -- helpers ---------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the Gymnasium env if this GymEnv made it (idempotent)."""
        gym = getattr(self, "gym", None)
        if gym is not None and self._owns_gym:
            self._owns_gym = False
            gym.close()

    def _prompt_messages(self, text: str) -> list[Message]:
        messages: list[Message] = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return messages + [{"role": "user", "content": text}]

    def _parse(self, reply: str, ended: bool) -> tuple[Any, str | None]:
        """``(action, None)`` or ``(None, why it is not a legal action)``; never raises for a bad reply."""
        if not ended:
            return None, f"the reply {reply!r:.60} was cut off by the token budget before ending its turn"
        try:
            gym_action = self.action_parser(reply)
        except ValueError as e:  # ActionParseError, or a custom parser's ValueError
            return None, str(e) or f"cannot read an action from {reply!r:.60}"
        if not self.gym.action_space.contains(gym_action):
            return None, f"{gym_action!r} is not in the action space {self.gym.action_space!r}"
        return gym_action, None

    def _fallback_action(self) -> Any:
        return self.gym.action_space.sample() if self._default_action is None else self._default_action

    def _describe(self, gym_action: Any) -> str:
        return str(gym_action.tolist() if hasattr(gym_action, "tolist") else gym_action)

    def _finish(
        self,
        action: Action,
        reward: float,
        metrics: dict[str, float],
        logs: dict[str, Any],
        *,
        terminated: bool,
        truncated: bool,
        context_full: bool = False,
    ) -> StepResult:
        self._done = True
        metrics = dict(
            metrics,
            episode_return=self.episode_return,
            episode_length=float(self.steps),
            terminated=float(terminated),
            truncated=float(truncated),
            invalid_actions=float(self.invalid_actions),
        )
        if self.mode == "full_history":
            metrics["context_full"] = float(context_full)
        final_ob = list(self._ob) + list(action)
        self.close()
        return StepResult(reward, True, final_ob, self.renderer.get_stop_sequences(), metrics, logs)


def _is_random(value: Any) -> bool:
    return isinstance(value, str) and value == "random"


# -- groups and datasets -------------------------------------------------------------------------------------


class GymGroupBuilder(EnvGroupBuilder):
    """``group_size`` episodes of one Gymnasium env with the same ``seed``, so GRPO compares replies to the same
    start state.

    Args:
        env: a Gymnasium id or a picklable factory (not an instance: a group needs ``group_size`` fresh envs).
        renderer: as for :class:`GymEnv`.
        seed: the reset seed of every episode of the group.
        group_size: episodes per group (GRPO's ``num_generations``).
        tags: logging tags (default: the env's name).
        **env_kwargs: any :class:`GymEnv` option (``mode``, ``formatter``, ``max_episode_steps``, ...).
    """

    def __init__(
        self,
        env: Any,
        renderer: Renderer,
        seed: int | None,
        group_size: int,
        tags: Sequence[str] | None = None,
        **env_kwargs: Any,
    ):
        if _is_gym_instance(env) or not (isinstance(env, str) or callable(env)):
            raise TypeError(
                f"GymGroupBuilder: env must be a Gymnasium id or a factory (a group needs {group_size} "
                f"fresh envs), got {type(env).__name__}"
            )
        if group_size < 1:
            raise ValueError(f"GymGroupBuilder({gym_env_name(env)}): group_size must be >= 1, got {group_size}")
        self.env, self.renderer, self.seed, self.group_size = env, renderer, seed, group_size
        self.tags = list(tags) if tags is not None else [gym_env_name(env)]
        self.env_kwargs = env_kwargs
        self._envs: list[GymEnv] = []

    async def make_envs(self) -> Sequence[Env]:
        envs = [GymEnv(self.env, self.renderer, seed=self.seed, **self.env_kwargs) for _ in range(self.group_size)]
        self._envs.extend(envs)
        return envs

    async def cleanup(self) -> None:
        for env in self._envs:
            env.close()
        self._envs.clear()

    def logging_tags(self) -> list[str]:
        return list(self.tags)

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__, _envs=[])  # live Gymnasium envs do not travel


class GymDataset(RLDataset):
    """``num_batches`` batches of ``batch_size`` :class:`GymGroupBuilder` s; group ``j`` of batch ``i`` resets with
    seed ``seed + i * batch_size + j`` (every group a different start, the same for every run)."""

    def __init__(
        self,
        env: Any,
        renderer: Renderer,
        *,
        batch_size: int,
        group_size: int,
        num_batches: int,
        seed: int = 0,
        tags: Sequence[str] | None = None,
        **env_kwargs: Any,
    ):
        if batch_size < 1 or num_batches < 1:
            raise ValueError(
                f"GymDataset({gym_env_name(env)}): batch_size and num_batches must be >= 1, got "
                f"{batch_size} and {num_batches}"
            )
        self.env, self.renderer, self.batch_size, self.group_size = env, renderer, batch_size, group_size
        self.num_batches, self.seed, self.tags, self.env_kwargs = num_batches, seed, tags, env_kwargs

    def get_batch(self, index: int) -> Sequence[EnvGroupBuilder]:
        if not 0 <= index < self.num_batches:
            raise IndexError(
                f"GymDataset({gym_env_name(self.env)}): batch {index} out of range (0..{self.num_batches - 1})"
            )
        first = self.seed + index * self.batch_size
        return [
            GymGroupBuilder(self.env, self.renderer, first + j, self.group_size, self.tags, **self.env_kwargs)
            for j in range(self.batch_size)
        ]

    def __len__(self) -> int:
        return self.num_batches


@dataclass
class GymDatasetBuilder(RLDatasetBuilder):
    """Train and test :class:`GymDataset` s of one Gymnasium env; training episodes are seeded from ``seed`` (the
    scripts pass the trainer's seed), test episodes from ``test_seed + TEST_SEED_OFFSET`` whatever ``seed``.

    ``env_kwargs`` are :class:`GymEnv` options.

    Raises:
        ValueError: the training episodes' seeds reach the test episodes' seeds.
    """

    env: Any
    renderer: Renderer
    batch_size: int = 4
    group_size: int = 4
    num_batches: int = 1000
    num_test_batches: int = 1
    seed: int = 0
    tags: Sequence[str] | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    test_seed: int = 0

    def __post_init__(self) -> None:
        train = range(self.seed, self.seed + self.num_batches * self.batch_size)
        test = range(
            self.test_seed + TEST_SEED_OFFSET,
            self.test_seed + TEST_SEED_OFFSET + self.num_test_batches * self.batch_size,
        )
        if self.num_test_batches > 0 and train.start < test.stop and test.start < train.stop:
            raise ValueError(
                f"GymDatasetBuilder: training episode seeds {train.start}..{train.stop - 1} overlap the "
                f"test episode seeds {test.start}..{test.stop - 1}; pick a seed below "
                f"{test.start - self.num_batches * self.batch_size + 1} or fewer batches."
            )

    async def __call__(self) -> tuple[RLDataset, RLDataset | None]:
        def dataset(num_batches: int, seed: int) -> GymDataset:
            return GymDataset(
                self.env,
                self.renderer,
                batch_size=self.batch_size,
                group_size=self.group_size,
                num_batches=num_batches,
                seed=seed,
                tags=self.tags,
                **self.env_kwargs,
            )

        test = dataset(self.num_test_batches, self.test_seed + TEST_SEED_OFFSET) if self.num_test_batches > 0 else None
        return dataset(self.num_batches, self.seed), test


__all__ = ["ActionParseError", "GymDataset", "GymDatasetBuilder", "GymEnv", "GymGroupBuilder", "gym_env_name"]
