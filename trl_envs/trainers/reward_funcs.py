"""TRL's ``reward_funcs`` beside the env's reward.

``EnvGRPOTrainer`` hands TRL one reward function per source of reward: first ``env`` (the env's total reward of each
episode: step rewards plus group reward), then each of the user's ``reward_funcs``. TRL combines them exactly as it
does for ``GRPOTrainer``: ``reward_weights`` (one weight per function, ``env`` first), ``multi_objective_aggregation``,
one ``rewards/<name>/mean`` and ``/std`` log per function.

What a user's reward function sees, per call (one call per generation batch, as in TRL):

* ``prompts``: the text of each episode's first observation (decoded, special tokens removed);
* ``completions``: with ``reward_completions="text"`` (default) the text of the episode's model turns (decoded,
  special tokens removed; the turns of a multi-turn episode joined by newlines, env turns left out); with
  ``"messages"`` a list of ``{"role": "assistant", "content": ...}`` messages, one per model turn;
* ``completion_ids``: the tokens the model sampled in the episode (every turn, in order);
* keyword arguments: ``trajectory`` (the :class:`~trl_envs.core.types.Trajectory`), ``env_reward`` (the env's total
  reward), ``group_key`` (the env group's key, ``"train/3/1"``), ``env_tags`` (the group's logging tags), and TRL's
  ``trainer_state``, ``log_metric`` and ``log_extra``.

The function is called once per episode, also when the episode trains as one row per turn (envs whose observations
do not extend each other): every row of the episode gets the episode's reward, as every row gets the env's. Rows
that train nothing (groups skipped after env errors, padding) are not shown to it and score ``None``. Return one
float (or ``None``: "not scored by this function", as in TRL) per episode; another length or a non-finite value
stops the run with one line naming the function.

Reward models (a model id, a path or a ``PreTrainedModel`` with its tokenizer, as ``GRPOTrainer`` takes them) score
the whole episode as the policy trained on it (first observation and completion, env tokens included) decoded with
the policy's tokenizer and tokenized with the reward model's, and read the first logit.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.types import Trajectory
from ..errors.types import RunFailed

ENV_REWARD_NAME = "env"
"""The name of the env's reward among TRL's reward functions (its ``reward_weights`` entry comes first)."""

REWARD_COMPLETIONS = ("text", "messages")

EPISODE_FIELD = "env_episode"
REWARD_FIELD = "env_reward"
METRICS_FIELD = "env_metrics"


@dataclass(frozen=True, eq=False)
class Episode:
    """One env episode as the reward functions see it (the ``env_episode`` field of its rows).

    Attributes:
        group_key: the key text of its env group.
        index: its position in the group.
        trajectory: the episode.
        env_reward: the env's total reward.
        tags: the group's logging tags.
        sequence_ids: the token sequence trained on (first observation + completion); for an episode trained as one
            row per turn, its last turn's observation and action.
    """

    group_key: str
    index: int
    trajectory: Trajectory
    env_reward: float
    tags: list[str] = field(default_factory=list)
    sequence_ids: list[int] = field(default_factory=list)

    def __repr__(self) -> str:  # TRL prints reward kwargs in warnings: keep it short
        return f"Episode({self.group_key}, {self.index}, env_reward={self.env_reward})"

    @property
    def prompt_ids(self) -> list[int]:
        return list(self.trajectory.transitions[0].ob) if self.trajectory.transitions else []

    @property
    def turn_ids(self) -> list[list[int]]:
        return [list(t.ac.tokens) for t in self.trajectory.transitions]


def env_reward(completions, env_reward: Sequence[float | None], env_metrics=None, log_metric=None, **kwargs):
    """The env's reward as a TRL reward function (named ``env``): the total reward of each row's episode (``None``
    for rows that train nothing). Also logs the step's env metrics through TRL's ``log_metric`` (averaged over the
    logging window and across processes, next to TRL's own metrics)."""
    if env_metrics and log_metric is not None:
        for name, values in env_metrics[0].items():
            for value in values:
                log_metric(name, value)
    return list(env_reward)


env_reward.__name__ = ENV_REWARD_NAME


def callable_name(func) -> str:
    """The name TRL gives a reward function (``__name__``; a partial's function; a callable object's class)."""
    while hasattr(func, "func") and hasattr(func, "args"):  # functools.partial
        func = func.func
    return getattr(func, "__name__", type(func).__name__)


def is_async(func) -> bool:
    while hasattr(func, "func") and hasattr(func, "args"):
        func = func.func
    if inspect.isfunction(func) or inspect.ismethod(func):
        return inspect.iscoroutinefunction(func)
    return inspect.iscoroutinefunction(type(func).__call__)  # a callable object: its class's __call__


class _EpisodeRows:
    """The distinct episodes of TRL's rows, and how to spread one value per episode back over the rows."""

    def __init__(self, episodes: Sequence[Episode | None]):
        self.unique: list[Episode] = []
        self.of_row: list[int | None] = []
        position: dict[int, int] = {}
        for episode in episodes:
            if episode is None:
                self.of_row.append(None)
                continue
            if id(episode) not in position:
                position[id(episode)] = len(self.unique)
                self.unique.append(episode)
            self.of_row.append(position[id(episode)])

    def spread(self, values: Sequence[Any], fill=None) -> list[Any]:
        return [fill if i is None else values[i] for i in self.of_row]


class EpisodeRewardFunction:
    """A user's reward function (TRL's signature) called on env episodes (see the module docstring).

    Args:
        func: the function, sync or async, ``func(prompts, completions, completion_ids, **kwargs) -> list``.
        completions_as: ``"text"`` or ``"messages"``.
    """

    def __init__(self, func: Callable, completions_as: str = "text"):
        if completions_as not in REWARD_COMPLETIONS:
            raise ValueError(f"reward_completions must be one of {list(REWARD_COMPLETIONS)}, got {completions_as!r}")
        self.func, self.completions_as, self.tokenizer = func, completions_as, None
        self.__name__ = callable_name(func)

    def bind(self, tokenizer, device=None) -> None:
        """Use the policy's ``tokenizer`` to decode episodes (the trainer calls it once it has one)."""
        self.tokenizer = tokenizer

    def arguments(self, kwargs: dict[str, Any]) -> tuple[_EpisodeRows, dict[str, Any]]:
        rows = _EpisodeRows(kwargs[EPISODE_FIELD])
        episodes = rows.unique
        decode = self.tokenizer.batch_decode
        turns = [decode(ep.turn_ids, skip_special_tokens=True) for ep in episodes]
        if self.completions_as == "messages":
            completions = [[{"role": "assistant", "content": t} for t in ep_turns] for ep_turns in turns]
        else:
            completions = ["\n".join(ep_turns) for ep_turns in turns]
        arguments = {
            "prompts": decode([ep.prompt_ids for ep in episodes], skip_special_tokens=True),
            "completions": completions,
            "completion_ids": [[t for turn in ep.turn_ids for t in turn] for ep in episodes],
            "trajectory": [ep.trajectory for ep in episodes],
            "env_reward": [ep.env_reward for ep in episodes],
            "group_key": [ep.group_key for ep in episodes],
            "env_tags": [list(ep.tags) for ep in episodes],
        }
        for name in ("trainer_state", "log_metric"):
            if name in kwargs:
                arguments[name] = kwargs[name]
        if "log_extra" in kwargs:
            log_extra = kwargs["log_extra"]
            arguments["log_extra"] = lambda column, values: log_extra(column, rows.spread(list(values)))
        return rows, arguments

    def finish(self, rows: _EpisodeRows, output) -> list[float | None]:
        output = list(output)
        if len(output) != len(rows.unique):
            raise RunFailed(
                f"reward function {self.__name__!r} returned {len(output)} rewards for {len(rows.unique)} episodes; "
                "return one float (or None) per episode"
            )
        for episode, value in zip(rows.unique, output):
            if value is not None and not math.isfinite(float(value)):
                raise RunFailed(
                    f"reward function {self.__name__!r} returned {value!r} for episode {episode.index} of env group "
                    f"{episode.group_key}; return a finite float, or None for an episode it does not score"
                )
        return rows.spread([None if v is None else float(v) for v in output])

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs):
        rows, arguments = self.arguments(kwargs)
        if not rows.unique:
            return [None] * len(rows.of_row)
        return self.finish(rows, self.func(**arguments))


class AsyncEpisodeRewardFunction(EpisodeRewardFunction):
    """:class:`EpisodeRewardFunction` of an ``async`` function (TRL awaits it beside the other async ones)."""

    async def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs):
        rows, arguments = self.arguments(kwargs)
        if not rows.unique:
            return [None] * len(rows.of_row)
        return self.finish(rows, await self.func(**arguments))


class RewardModelFunction:
    """A sequence-classification reward model scoring env episodes (see the module docstring).

    Args:
        model: the reward model (``num_labels=1``).
        tokenizer: its tokenizer.
        name: the name its rewards are logged under (TRL's: the last part of the model id).
    """

    def __init__(self, model, tokenizer, name: str):
        self.model, self.tokenizer, self.policy_tokenizer = model.eval().requires_grad_(False), tokenizer, None
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model.config.pad_token_id = self.tokenizer.pad_token_id  # the model reads the last non-pad token
        self.__name__ = name

    def bind(self, tokenizer, device=None) -> None:
        """Decode episodes with the policy's ``tokenizer``; move the reward model to the trainer's ``device``."""
        self.policy_tokenizer = tokenizer
        if device is not None:
            self.model.to(device)

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs):
        rows = _EpisodeRows(kwargs[EPISODE_FIELD])
        if not rows.unique:
            return [None] * len(rows.of_row)
        texts = self.policy_tokenizer.batch_decode([ep.sequence_ids for ep in rows.unique])
        inputs = self.tokenizer(
            text=texts, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False
        )
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            scores = self.model(**{k: v.to(device) for k, v in inputs.items()}).logits[:, 0]
        return rows.spread([float(s) for s in scores.float().cpu()])


def load_reward_model(model_id: str, model_init_kwargs: dict[str, Any] | None = None):
    """A reward model by Hub id or path, as ``GRPOTrainer`` loads one: ``AutoModelForSequenceClassification`` with
    ``num_labels=1`` (and ``model_init_kwargs``), and its tokenizer."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    kwargs = dict(model_init_kwargs or {})
    kwargs.pop("device_map", None)
    model = AutoModelForSequenceClassification.from_pretrained(model_id, num_labels=1, **kwargs)
    return model, AutoTokenizer.from_pretrained(model_id)


def episode_reward_functions(
    reward_funcs: Sequence[Any] | Any | None,
    reward_processing_classes: Sequence[Any] | Any | None,
    *,
    completions_as: str = "text",
    model_init_kwargs: dict[str, Any] | None = None,
) -> list[Callable]:
    """TRL's reward functions for env episodes: ``env`` first, then one per entry of ``reward_funcs`` (callables,
    async callables, reward model ids / paths, or ``PreTrainedModel`` objects with ``reward_processing_classes``,
    as ``GRPOTrainer`` takes them). Each but ``env`` is bound to the policy's tokenizer by the trainer (``bind``)."""
    from torch import nn

    if reward_funcs is None:
        reward_funcs = []
    elif not isinstance(reward_funcs, (list, tuple)):
        reward_funcs = [reward_funcs]
    if reward_processing_classes is None:
        reward_processing_classes = [None] * len(reward_funcs)
    elif not isinstance(reward_processing_classes, (list, tuple)):
        reward_processing_classes = [reward_processing_classes]
    if len(reward_processing_classes) != len(reward_funcs):
        raise ValueError(
            f"EnvGRPOTrainer: {len(reward_processing_classes)} reward_processing_classes for {len(reward_funcs)} "
            "reward_funcs; give one per reward function (None for a callable)"
        )
    functions: list[Callable] = [env_reward]
    for i, (func, processing_class) in enumerate(zip(reward_funcs, reward_processing_classes)):
        if isinstance(func, str):
            func, loaded_tokenizer = load_reward_model(func, model_init_kwargs)
            processing_class = processing_class or loaded_tokenizer
        if isinstance(func, nn.Module):
            if processing_class is None:
                from transformers import AutoTokenizer

                processing_class = AutoTokenizer.from_pretrained(func.config.name_or_path)
            name = (func.config.name_or_path or type(func).__name__).rstrip("/").split("/")[-1]
            functions.append(RewardModelFunction(func, processing_class, name))
        elif callable(func):
            wrapper = AsyncEpisodeRewardFunction if is_async(func) else EpisodeRewardFunction
            functions.append(wrapper(func, completions_as))
        else:
            raise TypeError(
                f"EnvGRPOTrainer: reward_funcs[{i}] is a {type(func).__name__}; give a callable, a reward model id or "
                "path, or a PreTrainedModel"
            )
    names = [f.__name__ for f in functions]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(
            f"EnvGRPOTrainer: reward functions {duplicates} share a name (the env's reward is named "
            f"{ENV_REWARD_NAME!r}); TRL logs each reward function by name, so give each its own __name__"
        )
    return functions


TRL_NAMED_REWARDS = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward")


def load_reward_func(spec: str):
    """A reward function named on the command line: ``module:function`` or ``module.function`` (a module on
    ``sys.path`` or in the working directory), one of TRL's own (``think_format_reward``, ``accuracy_reward``,
    ``reasoning_accuracy_reward``), or a reward model: a folder or a Hub id (``org/name``).

    Raises:
        ValueError: one line naming the entry, what was tried and the accepted forms.
    """
    forms = (
        "module:function, module.function, a TRL reward function name "
        f"({', '.join(TRL_NAMED_REWARDS)}), a reward model folder or Hub id"
    )
    if spec in TRL_NAMED_REWARDS:
        return getattr(importlib.import_module("trl.rewards"), spec)
    if ":" in spec or ("." in spec and "/" not in spec and not os.path.exists(spec)):
        module_name, _, name = spec.partition(":") if ":" in spec else spec.rpartition(".")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ValueError(f"--reward_funcs {spec}: cannot import module {module_name!r} ({error})") from None
        func = getattr(module, name, None)
        if not callable(func):
            raise ValueError(f"--reward_funcs {spec}: module {module_name!r} has no function {name!r}")
        return func
    if os.path.isdir(spec) or spec.count("/") == 1:
        return spec  # a reward model: loaded by the trainer, as GRPOTrainer loads one
    raise ValueError(f"--reward_funcs {spec}: not a reward function or reward model; accepted: {forms}")


__all__ = [
    "ENV_REWARD_NAME",
    "Episode",
    "EpisodeRewardFunction",
    "RewardModelFunction",
    "env_reward",
    "episode_reward_functions",
    "load_reward_func",
    "load_reward_model",
]
