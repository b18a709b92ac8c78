"""How the training scripts (``scripts/train_grpo.py``, ``scripts/train_dpo.py``) start: parse, check, lock, run.

:func:`run_training_script` parses the command line (or YAML ``--config``) with the script's parser, which picks the
defaults for the model (:mod:`trl_envs.run_defaults`), makes every check that needs no model
(:func:`preflight_training`), holds ``output_dir``'s lock for the whole run (a second run on the same folder is
refused), claims the folder (:mod:`~trl_envs.cli.run_folder`: a folder holding another run's model is refused), then
calls the script's ``main``. Input mistakes, stopped runs and signals end as described in
:mod:`~trl_envs.cli.errors`: one line on stderr and a non-zero exit status.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors.preflight import check_data_columns, check_script_settings
from .errors import run_command

PREFERENCE_COLUMNS = ("chosen", "rejected")
TOKENIZED_PREFERENCE_COLUMNS = ("prompt_ids", "chosen_ids", "rejected_ids")


def preflight_training(script_args: Any, training_args: Any, model_args: Any) -> None:
    """Every check a training script can make before loading a model: its own options (``script_args.check()``),
    the model path, sampling settings, counts, the env name, preference data files' columns, and the checkpoint to
    resume from (see :func:`~trl_envs.trainers.resume.resume_option`)."""
    from ..registry.names import get_env
    from ..trainers.resume import resume_option

    if hasattr(script_args, "check"):
        script_args.check()
    check_script_settings(script_args, training_args, model_args)
    env_name = getattr(script_args, "env_name", None)
    if env_name:
        get_env(env_name)  # unknown env: UnknownEnvError with a did-you-mean, before the model loads
    files = getattr(script_args, "data_files", None) or []
    dataset_name = getattr(script_args, "dataset_name", None)
    for flag, paths in (("--data_files", files), ("--dataset_name", [dataset_name] if dataset_name else [])):
        for path in paths:
            check_data_columns(path, PREFERENCE_COLUMNS, flag, alternatives=[TOKENIZED_PREFERENCE_COLUMNS])
    resume_option(training_args)


def run_training_script(
    prog: str,
    parse: Callable[[Sequence[str] | None], tuple],
    main: Callable[..., Any],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse ``argv`` (default: the command line) with ``parse(argv)`` -> ``(parsed dataclasses, settings)``, run
    :func:`preflight_training`, print the settings (:class:`~trl_envs.run_defaults.RunSettings`, or ``None``: nothing
    to print) once the checks passed, then ``main(*parsed)`` holding the output folder's lock; returns the exit status
    (see :func:`~trl_envs.cli.errors.run_command`)."""

    def body() -> None:
        from ..trainers.checkpoints import hold_output_dir, is_main_launch_process
        from ..trainers.resume import resume_option
        from .quiet import quiet_run
        from .run_folder import claim_output_dir, run_identity

        quiet_run()
        parsed, settings = parse(argv)
        script_args, training_args, model_args = parsed[:3]
        preflight_training(script_args, training_args, model_args)
        with hold_output_dir(training_args.output_dir):
            if is_main_launch_process():  # another run's model in output_dir: refused before the settings table
                claim_output_dir(
                    training_args.output_dir,
                    run_identity(algorithm_of(prog), script_args, model_args),
                    overwrite=bool(getattr(training_args, "overwrite_output_dir", False)),
                    resume_from=resume_option(training_args),
                )
            if settings is not None:  # after the checks: a mistake is one line, not a table and then the line
                settings.report()
            main(*parsed)

    return run_command(prog, body)


def algorithm_of(prog: str) -> str:
    """``grpo`` for ``train_grpo.py`` (``dpo`` for ``train_dpo.py``): the algorithm a training script's name says."""
    name = prog.rsplit("/", 1)[-1].removesuffix(".py")
    return name.removeprefix("train_")


__all__ = ["algorithm_of", "preflight_training", "run_training_script"]
