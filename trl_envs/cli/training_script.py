"""What the training scripts (``scripts/train_grpo.py``, ``scripts/train_dpo.py``) have in common.

* :class:`EnvArguments`: the env options (``--env``, ``--env_dataset``, ``--env_kwargs``, ...) and the offline demo
  model, which each script's ``ScriptArguments`` extends;
* :func:`make_parser` / :func:`parse_args`: the ``TrlParser`` of a script (command line and YAML ``--config``), with
  the defaults chosen for the model (:mod:`trl_envs.run_defaults`);
* :func:`load_tokenizer`, :func:`make_envs`: the model path and tokenizer of a run, and its envs;
* :func:`main_entry`: ``if __name__ == "__main__"`` — checks before any model loads, one line and a non-zero exit
  status for a mistake or a signal (:func:`~trl_envs.cli.scripts.run_training_script`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..envs import BUILTIN_ENVS
from ..tiny_model import DEMO_MODEL_NAME, MODEL_NAME


@dataclass
class EnvArguments:
    """The env of a run and the offline model used without ``--model_name_or_path``.

    Args:
        env_name: an env by name (``--env`` for short): built in, registered, installed, or ``package.module:factory``.
        env_dataset, env_dataset_split: a dataset of env rows instead (Hub id, ``save_to_disk`` folder, data file or
            folder of them) and its split.
        env_kwargs: options of the env by name, a JSON object (a mapping in YAML).
        num_env_batches: batches in the training ``RLDataset`` (env by name).
        tiny_model: the shipped offline model used when ``--model_name_or_path`` is not given.
    """

    env_name: str | None = field(
        default=None,
        metadata={
            "aliases": ["--env"],
            "help": f"An env by name: built-in {sorted(BUILTIN_ENVS)}, registered or installed "
            "(`trl_envs.list_envs()`), or 'package.module:factory'. (YAML key: env_name; TRL's YAML `env:` key sets "
            "environment variables.)",
        },
    )
    env_dataset: str | None = field(
        default=None,
        metadata={
            "help": 'A dataset of env rows instead ({"env": "arithmetic", "a": 2, "b": 3} ...), one group per row: a '
            "Hub id, a save_to_disk folder, a json/jsonl/parquet/csv file or a folder of them."
        },
    )
    env_dataset_split: str = field(default="train", metadata={"help": "Split of --env_dataset to use."})
    env_kwargs: str | None = field(  # a YAML mapping arrives as a dict; parse_env_kwargs takes both
        default=None,
        metadata={"help": "Options of the env by name: a JSON object (a YAML mapping), e.g. '{\"max_operand\": 9}'."},
    )
    num_env_batches: int = field(default=1000, metadata={"help": "Batches in the training RLDataset (env by name)."})
    tiny_model: str = field(
        default=DEMO_MODEL_NAME,
        metadata={
            "help": f"The shipped offline model used when --model_name_or_path is not given: {DEMO_MODEL_NAME} (the "
            f"demo model, bench/results/history.md) or {MODEL_NAME} (smaller and faster; the tests' model)."
        },
    )

    def check(self) -> None:
        """Raise ``ValueError`` for options that do not go together or a bad ``--env_kwargs``."""
        from ..registry import parse_env_kwargs

        if self.env_dataset and (self.env_name or self.env_kwargs):
            raise ValueError(
                "give either --env / --env_kwargs (an env by name) or --env_dataset (a dataset of env "
                "rows, whose rows hold the env options)"
            )
        parse_env_kwargs(self.env_kwargs)


COMMAND_HELP = {
    "grpo": """Train a language model with GRPO (TRL's GRPOTrainer) on an environment: each step plays groups of
episodes with the current policy and trains on their rewards. Prints the settings it chose and one line per step;
writes the model, training curves and a model card to outputs/grpo-<env> (or --output_dir).

examples:
  {prog}                                        # arithmetic, the offline demo model, on CPU
  {prog} --env guess_number                     # a multi-turn env (trl-envs list: all envs)
  {prog} --config scripts/configs/tic_tac_toe.yaml
  {prog} --env arithmetic --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --use_peft --lora_r 16
  {prog} --env_dataset my_env_rows.jsonl        # a dataset of env rows (docs/envs_as_datasets.md)

Every flag of EnvGRPOConfig (TRL's GRPOConfig), ModelConfig and the script follows, on the command line or as a key
of a YAML --config; the ones most runs set: --env, --env_kwargs, --model_name_or_path, --output_dir, --max_steps,
--learning_rate, --use_peft.""",
    "dpo": """Train a language model with DPO (TRL's DPOTrainer): offline on a preference dataset (prompt / chosen /
rejected), or env-driven, in rounds that sample pairs from an env with the current policy. Prints the settings it
chose and one line per log or round; writes the model, training curves and a model card to outputs/dpo-<data>
(or --output_dir).

examples:
  {prog}                                        # the built-in arithmetic preferences, the demo model, CPU
  {prog} --data_files prefs.jsonl               # your preference data (json / jsonl / parquet / csv)
  {prog} --dataset_name trl-lib/ultrafeedback_binarized --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct
  {prog} --env guess_number --num_rounds 10     # env-driven DPO: pairs sampled from an env
  {prog} --config scripts/configs/dpo_env_guess_number.yaml

Every flag of EnvDPOConfig (TRL's DPOConfig), ModelConfig and the script follows, on the command line or as a key of
a YAML --config; the ones most runs set: --dataset_name / --data_files or --env, --model_name_or_path, --output_dir,
--beta, --learning_rate, --num_train_epochs, --use_peft.""",
}
"""What ``--help`` of each training command says before its flags: what it does, and examples (``{prog}``: the
command as typed)."""


TYPED_COMMAND: list[str] = []
"""The ``trl-envs`` subcommand running a training script in this process (``["trl-envs dpo"]``), set by
:func:`~trl_envs.cli.train.run` (``runpy`` puts the script's path in ``sys.argv[0]``)."""


def command_prog(command: str) -> str:
    """The command as the user typed it: ``trl-envs grpo`` under the ``trl-envs`` command, else the script."""
    if TYPED_COMMAND:
        return TYPED_COMMAND[-1]
    return f"python scripts/train_{command}.py" if command else os.path.basename(sys.argv[0])


def make_parser(
    dataclass_types: Sequence[type],
    demo_recipe: dict[str, Any],
    *,
    subparsers=None,
    command: str = "",
    help: str = "",
    demo_defaults: bool = True,
):
    """The ``TrlParser`` of a script over ``dataclass_types``, as a ``command`` of ``subparsers`` when given, with the
    ``demo_recipe`` as defaults (``demo_defaults=False``: without them; :func:`parse_args` adds them for the demo model
    only), on CPU when there is no GPU and in bf16 where the GPU has it."""
    import argparse

    import torch
    from trl import TrlParser

    class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
        """The description as written (examples keep their lines), each flag's default after its help."""

    prog = command_prog(command)
    text: dict[str, Any] = {"formatter_class": HelpFormatter}
    if command in COMMAND_HELP:  # the flags are listed below the description; the usage line stays one line
        text["usage"] = f"{prog} [--config FILE.yaml] [OPTIONS]"
    if command in COMMAND_HELP:
        text["description"] = COMMAND_HELP[command].format(prog=prog)
    if subparsers is not None:
        parser = subparsers.add_parser(command, help=help, dataclass_types=tuple(dataclass_types), **text)
    else:
        parser = TrlParser(tuple(dataclass_types), prog=prog, **text)
    parser.set_defaults_with_config(
        **(demo_recipe if demo_defaults else {}),
        use_cpu=not torch.cuda.is_available(),
        bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
    )
    return parser


def parse_args(
    parser, demo_recipe: dict[str, Any], argv: Sequence[str] | None, *, report: bool, algorithm: str, **options
):
    """Parse ``argv`` (default ``sys.argv[1:]``) and ``--config`` with ``parser`` (made with ``demo_defaults=False``):
    the demo model gets ``demo_recipe``, any other model TRL's defaults plus the env's token budgets, and the output
    folder defaults to :func:`default_output_dir` (``options``: see :func:`~trl_envs.run_defaults.parse_run_args`).
    Prints the settings chosen and where each came from (``report``); returns ``(parser, parsed dataclasses,
    settings)``."""
    from ..run_defaults import parse_run_args

    fallback = options.pop("env_label", "env")
    parsed, settings = parse_run_args(
        parser,
        demo_recipe,
        argv,
        script_defaults=lambda env, model: {"output_dir": default_output_dir(algorithm, env or fallback, model)},
        **options,
    )
    if report:
        settings.report()
    return parser, parsed, settings


def default_output_dir(algorithm: str, env: str, model: str | None) -> str:
    """Where a run writes unless ``--output_dir`` says: ``outputs/<algorithm>-<env>`` (``env``: the env's name, or the
    ``--env_dataset``'s) for the demo model
    (``outputs/grpo-arithmetic``), ``outputs/<algorithm>-<env>-<model>`` for any other (``outputs/grpo-guess-number-
    Qwen2.5-0.5B-Instruct``: the last part of its Hub id or path), so that runs of other envs or models never share a
    folder."""
    name = f"{algorithm}-{env.replace('_', '-')}"
    if model and model != DEMO_MODEL_NAME:
        last = os.path.basename(os.path.normpath(os.path.expanduser(model)))
        if last and last != DEMO_MODEL_NAME:
            name += f"-{last}"
    return os.path.join("outputs", re.sub(r"[^\w.+-]+", "-", name))


def load_tokenizer(model_args, tiny_model: str) -> tuple[str, Any]:
    """``(model path, tokenizer)``: ``--model_name_or_path`` (a Hub id or a path), by default the offline tiny chat
    model ``tiny_model`` (it ships with the package)."""
    from transformers import AutoTokenizer

    from ..tiny_model import tiny_model_path

    model_path = model_args.model_name_or_path or tiny_model_path(tiny_model)
    return model_path, AutoTokenizer.from_pretrained(model_path, revision=model_args.model_revision)


def make_envs(
    script_args: EnvArguments,
    tokenizer,
    *,
    env_name: str | None,
    env_kwargs: dict[str, Any],
    group_size: int,
    groups_per_batch: int,
    seed: int,
) -> tuple[Any, list[str]]:
    """``(env_dataset, env names)`` of a run: the rows of ``--env_dataset`` (a ``datasets.Dataset`` the trainer turns
    into groups; the names are the env kinds of its rows), or the env ``env_name`` with ``env_kwargs`` from the
    registry, in groups of ``group_size`` (an env option named ``group_size``, a tinker-cookbook builder's field, is
    the env's to set), ``groups_per_batch`` per batch; ``seed`` (the trainer's) picks the training problems and their
    order of envs that take one."""
    from ..core.renderer import Renderer
    from ..registry import ENV_FIELD, make_env_dataset
    from ..registry.env_datasets import load_env_dataset

    if script_args.env_dataset:
        rows = load_env_dataset(script_args.env_dataset, script_args.env_dataset_split)
        return rows, sorted(set(rows[ENV_FIELD]))
    envs = make_env_dataset(
        env_name,
        Renderer(tokenizer),
        **{"group_size": group_size, **env_kwargs},
        groups_per_batch=groups_per_batch,
        num_batches=script_args.num_env_batches,
        defaults={"seed": seed},
    )
    return envs, [env_name]


def main_entry(prog: str, parse: Callable[..., tuple], main: Callable[..., Any]) -> None:
    """A script's ``if __name__ == "__main__"``: parse (``parse(argv, report=False)`` -> ``(parser, parsed,
    settings)``), check, run ``main(*parsed)``; mistakes and signals end in one line and a non-zero exit status, and
    the process exits within :data:`~trl_envs.cli.errors.EXIT_GRACE_S` seconds of the end of its work."""
    from .errors import bound_exit
    from .scripts import run_training_script

    prog = TYPED_COMMAND[-1] if TYPED_COMMAND else prog  # errors name the command as the user typed it
    status = run_training_script(prog, lambda argv: parse(argv, report=False)[1:], main)
    bound_exit(prog, status)  # whatever would hold the process at exit, it ends within seconds
    if status:
        sys.exit(status)


__all__ = [
    "EnvArguments",
    "default_output_dir",
    "load_tokenizer",
    "main_entry",
    "make_envs",
    "make_parser",
    "parse_args",
]
