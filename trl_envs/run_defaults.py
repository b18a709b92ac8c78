"""Which defaults a training script run gets, and where each setting came from.

The training scripts carry a recipe for the demo model (a 0.16M-parameter model: a high learning rate, large batches
of short answers, a few minutes on a CPU). That recipe is right for the offline tiny models only. Every other model
gets TRL's defaults plus what the env needs to be played at all: its token budgets (tokens per turn, turns per
episode), from :data:`ENV_BUDGETS`. Whatever the user sets (command line or ``--config`` YAML) wins over both.

:func:`parse_run_args` does it for a script's ``TrlParser``: it parses once to learn the model and the env, sets the
defaults that apply, parses again, and returns the parsed dataclasses with a :class:`RunSettings` that says, for the
settings that matter, the value and where it came from (``command line``, ``config <file>``, ``demo recipe``,
``env <name>``, ``TRL default``); :meth:`RunSettings.table` prints them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .model_names import MODEL_NAMES

ENV_BUDGETS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    # A real model may explain before it answers: room for a short worked answer.
    "arithmetic": lambda kw: {"max_completion_length": 256, "max_turns": 1},
    "judged_arithmetic": lambda kw: {"max_completion_length": 256, "max_turns": 1},
    # One guess per turn, as many turns as the game allows.
    "guess_number": lambda kw: {"max_completion_length": 32, "max_turns": int(kw.get("max_guesses", 6))},
    # A tool call is a few dozen tokens of JSON; the answer comes after at most max_tool_calls calls.
    "tool_use": lambda kw: {"max_completion_length": 128, "max_turns": int(kw.get("max_tool_calls", 4)) + 1},
    # A move is a square number; X moves at most 5 times.
    "tic_tac_toe": lambda kw: {"max_completion_length": 32, "max_turns": 5},
    # One push (0 or 1) per turn, one turn per step of the episode.
    "cartpole": lambda kw: {"max_completion_length": 8, "max_turns": int(kw.get("max_episode_steps", 500))},
}
"""Per built-in env: the token budgets it needs, from its options (``env_kwargs``). ``max_completion_length`` is the
budget of one turn (GRPO; DPO's env mode calls it ``max_tokens_per_turn``)."""

ENV_ONLY_SETTINGS = (
    "env_name",
    "env_dataset",
    "num_rounds",
    "group_size",
    "groups_per_round",
    "max_tokens_per_turn",
    "max_turns",
    "temperature",
)
"""Settings of a run driven by an env (rounds, sampling, turn budgets): not shown for offline DPO."""

SHOWN = (
    "model_name_or_path",
    "env_name",
    "env_dataset",
    "output_dir",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_generations",
    "per_device_eval_batch_size",
    "max_steps",
    "num_train_epochs",
    "num_rounds",
    "group_size",
    "groups_per_round",
    "max_completion_length",
    "max_tokens_per_turn",
    "max_turns",
    "beta",
    "temperature",
    "reward_funcs",
    "reward_weights",
    "use_peft",
    "bf16",
    "use_cpu",
    "activation_checkpointing",
    "logging_steps",
    "report_to",
    "seed",
)
"""The settings :meth:`RunSettings.table` lists (those a run has)."""


HARDWARE_SETTINGS = ("use_cpu", "bf16")
"""Settings the scripts default from the machine (a GPU or not, bf16 support)."""


def is_demo_model(model_name_or_path: str | None) -> bool:
    """Whether the run trains an offline tiny model: no model given (the demo model is built), or a path whose last
    part is a tiny model's name (``tiny-chat-v5``, ``tiny-chat-v1``)."""
    if not model_name_or_path:
        return True
    return os.path.isdir(model_name_or_path) and os.path.basename(os.path.normpath(model_name_or_path)) in MODEL_NAMES


def env_budgets(
    env_name: str | None, env_kwargs: dict[str, Any] | None, *, per_turn_key: str = "max_completion_length"
) -> dict[str, Any]:
    """The budgets ``env_name`` needs (:data:`ENV_BUDGETS`; ``{}`` for an env it does not know), the per-turn budget
    under ``per_turn_key``."""
    budgets = ENV_BUDGETS.get(env_name or "")
    if budgets is None:
        return {}
    values = dict(budgets(env_kwargs or {}))
    values[per_turn_key] = values.pop("max_completion_length")
    return values


@dataclass
class RunSettings:
    """The settings of a run and where each came from.

    Attributes:
        values: setting name -> value (as parsed).
        sources: setting name -> ``command line``, ``config <file>``, ``demo recipe``, ``env <name>``,
            ``script default``, ``this machine``, ``TRL default`` or ``trl_envs default``.
        demo: whether the demo recipe applied.
    """

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    demo: bool = False

    def report(self) -> None:
        """Print :meth:`table` once per launch: on the process of rank 0 (``RANK`` unset or 0)."""
        if os.environ.get("RANK", "0") == "0":
            print(self.table(), flush=True)

    def table(self) -> str:
        """One line per setting: ``name  value  (source)``."""
        width = max(map(len, self.values), default=0)
        recipe = "demo recipe: the offline demo model" if self.demo else "TRL defaults + what the env needs"
        lines = [f"[trl_envs] settings ({recipe}):"]
        for name, value in self.values.items():
            value = getattr(value, "value", value)
            lines.append(f"  {name.ljust(width)}  {value!s:<28} ({self.sources[name]})")
        return "\n".join(lines)


def config_path(argv: Sequence[str]) -> str | None:
    """The ``--config`` YAML file ``argv`` names, or ``None``."""
    config = None
    for i, token in enumerate(argv):
        if token == "--config" and i + 1 < len(argv):
            config = argv[i + 1]
        elif token.startswith("--config="):
            config = token.split("=", 1)[1]
    return config


def read_config(path: str | None) -> dict[str, Any]:
    """The mapping of the ``--config`` YAML file ``path`` (``{}`` for none).

    Raises:
        UsageError: the file is missing, unreadable, or not a mapping of settings.
    """
    if not path:
        return {}
    import yaml

    from .errors.types import UsageError

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as e:
        raise UsageError(f"--config {path}: cannot be read ({type(e).__name__}: {str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: a YAML mapping of settings (key: value) is expected")
    return data


def explicit_settings(parser, argv: Sequence[str]) -> dict[str, str]:
    """Setting name -> ``command line`` or ``config <file>`` for what the user set in ``argv`` (flags, aliases
    included) or in the ``--config`` YAML file it names."""
    found: dict[str, str] = {}
    config = config_path(argv)
    if config:
        data = read_config(config)
        found.update({key: f"config {config}" for key in data if key != "env"})  # `env:` sets environment variables
    flags = {token.split("=", 1)[0] for token in argv if token.startswith("-")}
    for action in parser._actions:
        if any(option in flags for option in action.option_strings):
            found[action.dest] = "command line"
    return found


PEEKED = (
    "model_name_or_path",
    "env_name",
    "env_dataset",
    "env_kwargs",
    "tiny_model",
    "num_generations",
    "per_device_eval_batch_size",
)
"""What decides a run's defaults: read from the command line and ``--config`` before the full parse."""


def peek_settings(parser, argv: Sequence[str]) -> dict[str, Any]:
    """The values of :data:`PEEKED` in ``argv`` / its ``--config`` file, else ``parser``'s defaults, without building
    the training dataclasses (whose checks need the defaults this decides: the demo recipe's batch, for one)."""
    import argparse

    values = {
        action.dest: action.default
        for action in parser._actions
        if action.dest in PEEKED and action.default is not argparse.SUPPRESS
    }
    values.update({k: v for k, v in read_config(config_path(argv)).items() if k in PEEKED})
    peek = argparse.ArgumentParser(add_help=False)
    for action in parser._actions:
        if action.dest in PEEKED and action.option_strings:
            peek.add_argument(*action.option_strings, dest=action.dest, default=argparse.SUPPRESS)
    given, _ = peek.parse_known_args(list(argv))
    values.update(vars(given))
    return values


def parse_run_args(
    parser,
    demo_recipe: dict[str, Any],
    argv: Sequence[str] | None = None,
    *,
    per_turn_key: str = "max_completion_length",
    env_default: str | None = None,
    script_defaults: Callable[[str | None], dict[str, Any]] | None = None,
) -> tuple[tuple, RunSettings]:
    """Parse ``argv`` (default ``sys.argv[1:]``) with a script's ``TrlParser`` whose defaults do not include
    ``demo_recipe``; apply the demo recipe (offline tiny model) or the env's budgets (any other model) as defaults;
    return the parsed dataclasses and the :class:`RunSettings` of the run.

    ``per_turn_key`` names the trainer's per-turn token budget; ``env_default`` is the env trained on when none is
    named (the GRPO script's ``arithmetic``; ``None`` when no env is the default, as for offline DPO);
    ``script_defaults(env_name, model)`` gives defaults of the script for any model (e.g. an output directory named
    after the env and the model), under the recipe and the env's budgets.

    Raises:
        UsageError: an unknown flag or ``--config`` key (named, with the closest known names)."""
    from .errors.unknown_args import check_known_args

    argv = list(sys.argv[1:] if argv is None else argv)
    check_known_args(parser, argv, read_config(config_path(argv)), config_path(argv) or "")
    peeked = peek_settings(parser, argv)
    model = peeked.get("model_name_or_path")
    demo = is_demo_model(model)
    env_name = peeked.get("env_name") or (None if peeked.get("env_dataset") else env_default)
    if demo:
        added, label = dict(demo_recipe), "demo recipe"
    else:
        from .registry import parse_env_kwargs

        env_kwargs = parse_env_kwargs(peeked.get("env_kwargs")) or {}
        added, label = env_budgets(env_name, env_kwargs, per_turn_key=per_turn_key), f"env {env_name}"
    run_model = model or peeked.get("tiny_model")
    common = {
        k: v
        for k, v in (script_defaults(env_name or _dataset_name(peeked), run_model) if script_defaults else {}).items()
        if k not in added
    }
    common.update(eval_batch_default(parser, peeked, {**common, **added}))
    if common or added:
        parser.set_defaults_with_config(**{**common, **added})
    parsed = parser.parse_args_and_config(args=argv)
    explicit = explicit_settings(parser, argv)
    settings = RunSettings(demo=demo)
    for name in SHOWN:
        holder = _find(parsed, name)
        if holder is None:
            continue
        settings.values[name] = getattr(holder, name)
        settings.sources[name] = explicit.get(name) or (
            label
            if name in added
            else "script default"
            if name in common
            else "this machine"
            if name in HARDWARE_SETTINGS
            else "TRL default"
            if _is_upstream_field(holder, name)
            else "trl_envs default"
        )
    if "env_name" in settings.values and settings.values["env_name"] is None and env_name:
        settings.values["env_name"], settings.sources["env_name"] = env_name, "script default"
    for name in ("env_dataset", "reward_funcs", "reward_weights"):  # shown only when the run has them
        if settings.values.get(name) is None:
            settings.values.pop(name, None)
            settings.sources.pop(name, None)
    if peeked.get("env_dataset") and settings.values.get("env_name") is None:  # the rows name their envs
        settings.values.pop("env_name", None)
        settings.sources.pop("env_name", None)
    if settings.values.get("model_name_or_path") is None and "model_name_or_path" in settings.values:
        settings.values["model_name_or_path"] = peeked.get("tiny_model")
        settings.sources["model_name_or_path"] = "script default (offline demo model)"
    if env_name is None and not peeked.get("env_dataset"):  # offline DPO: no env, so the env's
        # settings (rounds, sampling, turn budgets) mean nothing and are not shown
        for name in ENV_ONLY_SETTINGS:
            settings.values.pop(name, None)
            settings.sources.pop(name, None)
    return parsed, settings


def _dataset_name(peeked: dict[str, Any]) -> str | None:
    """The last part of ``--env_dataset`` without its file extension (``my_rows`` for ``data/my_rows.jsonl``)."""
    dataset = peeked.get("env_dataset")
    if not dataset:
        return None
    return os.path.splitext(os.path.basename(os.path.normpath(str(dataset))))[0] or None


def eval_batch_default(parser, peeked: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``{"per_device_eval_batch_size": n}`` when the user did not set it and TRL's default would not hold whole groups
    of the run's ``num_generations`` (TRL refuses an evaluation batch that splits a group): the default rounded up to
    a multiple of it. ``{}`` otherwise, and for trainers without groups."""
    dests = {action.dest: action.default for action in parser._actions}
    if "num_generations" not in dests or "per_device_eval_batch_size" not in dests:
        return {}
    if peeked.get("per_device_eval_batch_size") not in (None, dests["per_device_eval_batch_size"]):
        return {}
    given = peeked.get("num_generations")
    group = int(given if given not in (None, dests["num_generations"]) else defaults.get("num_generations", given) or 0)
    batch = int(dests["per_device_eval_batch_size"] or 0)
    if group < 1 or batch < 1 or batch % group == 0:
        return {}
    return {"per_device_eval_batch_size": -(-batch // group) * group}


def _is_upstream_field(obj: Any, name: str) -> bool:
    """Whether ``name`` is a field of a TRL / transformers dataclass that ``obj``'s class derives from."""
    import dataclasses

    for cls in type(obj).__mro__:
        if (
            cls.__module__.split(".")[0] in ("trl", "transformers")
            and dataclasses.is_dataclass(cls)
            and name in {f.name for f in dataclasses.fields(cls)}
        ):
            return True
    return False


def _find(parsed: Sequence[Any], name: str) -> Any:
    """The first of ``parsed`` that has the field ``name``."""
    for obj in parsed:
        if hasattr(obj, name):
            return obj
    return None
