"""After training: evaluate before/after, plot the training curves, write the config and the model card, push.

The training scripts call :func:`take_over_push` before building the trainer, then :func:`save_run` and
:func:`publish_run` after training. Everything lands in ``output_dir`` first, so the folder on disk is exactly what
is pushed:

* the model or LoRA adapter, the tokenizer and ``log_history.json`` (the logged metrics), by :func:`save_run`,
* ``training_curves.png`` (reward and entropy against steps),
* ``training_config.json`` (training, model and script settings; tokens masked),
* ``eval_results.json`` (the env evaluation of the base model and of the trained one, same problems and seeds),
* ``README.md``, the model card.

``--push_to_hub`` is taken over from the Trainer (which would push from ``save_model`` with TRL's own card and push
again at the end); the folder is pushed once, at the end, by :func:`~trl_envs.hub.push.push_folder_to_hub` with the
Trainer's ``hub_model_id``, ``hub_token``, ``hub_private_repo`` and ``hub_revision``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..rollout.evaluation import EvalResult
from .model_card import ModelCardInfo, write_model_card
from .model_loading import ADAPTER_CONFIG
from .plots import PLOT_FILE, plot_training_curves
from .push import push_folder_to_hub

_COMMON_SETTINGS = (
    "learning_rate",
    "max_steps",
    "num_train_epochs",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
)
_ENV_SAMPLING = ("temperature", "max_tokens_per_turn", "max_turns")
CARD_HYPERPARAMETERS: dict[str, tuple[str, ...]] = {
    "grpo": (*_COMMON_SETTINGS, "num_generations", "beta", "loss_type", *_ENV_SAMPLING, "seed"),
    "dpo": (*_COMMON_SETTINGS, "beta", "loss_type", "max_length", "seed"),
    "dpo-env": (
        *_COMMON_SETTINGS,
        "num_rounds",
        "group_size",
        "groups_per_round",
        "beta",
        "loss_type",
        *_ENV_SAMPLING,
        "seed",
    ),
}
"""Training settings shown on the model card, per algorithm and mode (``dpo``: offline, ``dpo-env``: env-driven):
only those that acted in the run (the full config is in ``training_config.json``)."""


@dataclass
class PublishArguments:
    """Command-line options of the end-of-training evaluation for the model card (``--card_eval ...``) and of the
    run's progress display (``--progress``)."""

    card_eval: bool = field(
        default=True,
        metadata={
            "help": "Evaluate the base model and the trained model on the env's test problems for the model card's "
            "table (--card_eval false to skip)."
        },
    )
    card_eval_env: str | None = field(
        default=None, metadata={"help": "Env to evaluate on (default: the training env)."}
    )
    card_eval_problems: int = field(
        default=32,
        metadata={"help": "Test problems in the card's evaluation (at most: a smaller test split is played whole)."},
    )
    card_eval_samples: int = field(
        default=8, metadata={"help": "Samples per problem (the n of pass@n) in the card's evaluation."}
    )
    card_eval_temperature: float | None = field(
        default=None,
        metadata={
            "help": "Sampling temperature of the card's evaluation (default: the training temperature; 0: greedy)."
        },
    )
    card_eval_seed: int = field(default=0, metadata={"help": "Sampling seed of the card's evaluation."})
    progress: bool | None = field(
        default=None,
        metadata={
            "help": "Progress bars (training steps with elapsed time and ETA, the card's evaluations): true, false, or "
            "unset for 'when stderr or stdout is a terminal' (stdout under accelerate launch)."
        },
    )


@dataclass
class PublishResult:
    """What :func:`publish_run` wrote and pushed (on the main process; ``None`` fields on the others)."""

    output_dir: str
    card_path: str | None = None
    plot_path: str | None = None
    eval_before: EvalResult | None = None
    eval_after: EvalResult | None = None
    repo_url: str | None = None


def take_over_push(training_args) -> bool:
    """Whether to push at the end (``training_args.push_to_hub``), turning the Trainer's own pushing off.

    With ``push_to_hub`` the Hub repo is created (or found) now, so a bad token, a repo id that is not yours or an
    unreachable Hub shows before training.

    Raises:
        ValueError: ``--push_to_hub`` in offline mode (``HF_HUB_OFFLINE=1``), or the repo cannot be created or reached
            (:class:`~trl_envs.errors.types.UsageError`): said before training, not after.
    """
    push = bool(training_args.push_to_hub)
    if push:
        from huggingface_hub.constants import is_offline_mode

        if is_offline_mode():
            raise ValueError(
                "--push_to_hub: huggingface_hub is in offline mode (HF_HUB_OFFLINE=1), nothing could "
                "be pushed; unset HF_HUB_OFFLINE or drop --push_to_hub"
            )
        from ..errors.preflight import check_hub_access

        check_hub_access(
            training_args.hub_model_id or Path(training_args.output_dir).absolute().name,
            token=training_args.hub_token,
            private=training_args.hub_private_repo,
        )
    training_args.push_to_hub = False
    return push


def save_run(trainer, tokenizer) -> None:
    """Save the model (or adapter; on every process, as ``save_model`` needs) and, on the main process, the tokenizer,
    ``log_history.json``, and what Hugging Face's example scripts write: ``trainer_state.json`` (``save_state``) and
    the training summary (``train_runtime``, ``train_loss``, ...) as ``train_results.json`` / ``all_results.json``
    (``save_metrics``), into ``trainer.args.output_dir``: what the scripts do before :func:`publish_run`."""
    output_dir = trainer.args.output_dir
    trainer.save_model(output_dir)
    trainer.save_state()  # writes on the main process only
    summary = next((h for h in reversed(trainer.state.log_history) if "train_runtime" in h), None)
    if summary is not None:
        trainer.save_metrics("train", {k: v for k, v in summary.items() if k not in ("step", "epoch")})
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(output_dir)
        with open(os.path.join(output_dir, "log_history.json"), "w") as f:
            json.dump(trainer.state.log_history, f, indent=1)
        print(f"saved to {output_dir}")


def publish_run(
    trainer,
    *,
    base_model: str,
    algorithm: str,
    envs: list[str],
    push: bool,
    publish_args: PublishArguments | None = None,
    env_kwargs: dict[str, Any] | None = None,
    eval_env: str | None = None,
    eval_env_kwargs: dict[str, Any] | None = None,
    datasets: list[str] | None = None,
    train_data: str | None = None,
    script_args: Any = None,
    model_args: Any = None,
) -> PublishResult:
    """Write the curves, config, evaluation and model card into ``trainer.args.output_dir`` (already holding the
    saved model and tokenizer) and push the folder if ``push``. Runs on the main process only.

    Args:
        trainer: the trainer after ``train()`` and ``save_model(output_dir)``.
        base_model: the model trained from (Hub id or path): evaluated as "before training".
        algorithm: ``"grpo"`` or ``"dpo"``.
        envs: the env names trained on (empty for preference data).
        push: push the folder (see :func:`take_over_push`).
        publish_args: the card's evaluation settings (default: :class:`PublishArguments`' defaults).
        env_kwargs: the training env's options, used when the card's eval env is the training env.
        eval_env: the env to evaluate on when ``publish_args.card_eval_env`` is not set (default: ``envs[0]``).
        eval_env_kwargs: the options of ``eval_env`` when it is not a training env (e.g. the held-out split of the
            data trained on).
        datasets: Hub datasets trained on, for the card's metadata.
        train_data: what offline DPO trained on, for the card's text (e.g. ``"`prefs.jsonl` (40 rows)"``).
        script_args, model_args: the script's own options and TRL's ``ModelConfig`` (dataclasses), saved in
            ``training_config.json``.
    """
    args = trainer.args
    output_dir = str(args.output_dir)
    result = PublishResult(output_dir)
    if not trainer.accelerator.is_main_process:
        return result
    publish_args = publish_args or PublishArguments()
    is_adapter = os.path.isfile(os.path.join(output_dir, ADAPTER_CONFIG))

    result.plot_path = plot_training_curves(
        trainer.state.log_history,
        os.path.join(output_dir, PLOT_FILE),
        title=f"{algorithm.upper()} on {', '.join(envs) or 'preference data'}",
    )
    _write_config(output_dir, algorithm, base_model, envs, env_kwargs, args, script_args, model_args, push)

    repo_id = args.hub_model_id or Path(output_dir).absolute().name
    # What the card's commands and snippets load: the Hub repo when there is one, else the folder, as a path that
    # resolves from where the run was started (a bare folder name would be taken for a Hub id).
    model_ref = repo_id if (push or args.hub_model_id) else output_dir
    env = publish_args.card_eval_env or eval_env or (envs[0] if envs else None)
    settings: dict[str, Any] = {}
    if publish_args.card_eval and env is None:
        print("[trl_envs] model card: no env to evaluate on (give --card_eval_env); the card has no evaluation table")
    elif publish_args.card_eval:
        from .model_eval import NoTestSplitError

        kwargs = env_kwargs if env in envs else eval_env_kwargs if env == eval_env else None
        try:
            result.eval_before, result.eval_after, settings = _evaluate_before_after(
                trainer, base_model, output_dir, model_ref, env, kwargs, publish_args
            )
        except NoTestSplitError:  # the trained model is saved; the card just has nothing held out to report
            print(
                f"[trl_envs] model card: env {env!r} has no test split, so the card has no evaluation table (give "
                "--card_eval_env an env with held-out problems, or --card_eval false)"
            )

    info = ModelCardInfo(
        model_name=repo_id.split("/")[-1],
        base_model=base_model,
        algorithm=algorithm,
        envs=list(envs),
        is_adapter=is_adapter,
        repo_id=model_ref,
        eval_env=env if result.eval_after is not None else None,
        eval_before=result.eval_before,
        eval_after=result.eval_after,
        eval_settings=settings,
        plot_file=PLOT_FILE if result.plot_path else None,
        datasets=list(datasets or []),
        train_data=train_data,
        hyperparameters=_card_hyperparameters(args, algorithm if algorithm != "dpo" or not envs else "dpo-env"),
    )
    result.card_path = write_model_card(output_dir, info)
    print(f"[trl_envs] wrote the model card {result.card_path}")
    if push:
        result.repo_url = push_folder_to_hub(
            output_dir,
            repo_id,
            token=args.hub_token,
            private=args.hub_private_repo,
            revision=args.hub_revision,
            commit_message=f"{algorithm.upper()} with trl_envs: end of training",
        )
        print(f"[trl_envs] pushed {output_dir} to {result.repo_url}")
    return result


def _card_hyperparameters(args, mode: str) -> dict[str, Any]:
    names = CARD_HYPERPARAMETERS.get(mode, CARD_HYPERPARAMETERS["grpo"])
    shown = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    if shown.get("max_steps", -1) > 0:
        shown.pop("num_train_epochs", None)  # max_steps wins
    return shown


def _evaluate_before_after(
    trainer, base_model: str, output_dir: str, model_ref: str, env: str, env_kwargs, publish_args
):
    from .model_eval import evaluate_model

    args = trainer.args
    budget = args.rollout_budget()
    temperature = publish_args.card_eval_temperature
    if temperature is None:
        temperature = getattr(args, "temperature", 1.0)
    settings = {
        "problems": publish_args.card_eval_problems,
        "samples per problem": publish_args.card_eval_samples,
        "temperature": temperature,
        "seed": publish_args.card_eval_seed,
    }
    command = ["trl-envs", "eval", "--model", model_ref, "--env", env]
    if env_kwargs:
        command += ["--env_kwargs", json.dumps(env_kwargs)]
    command += [
        "--num_problems",
        publish_args.card_eval_problems,
        "--samples_per_problem",
        publish_args.card_eval_samples,
        "--temperature",
        temperature,
        "--max_tokens",
        budget.max_tokens_per_turn,
        "--max_turns",
        "none" if budget.max_turns is None else budget.max_turns,
    ]
    if budget.max_tokens_per_trajectory is not None:
        command += ["--max_tokens_per_trajectory", budget.max_tokens_per_trajectory]
    command += ["--seed", publish_args.card_eval_seed]
    settings["command"] = shlex.join(map(str, command))
    common = dict(
        env_kwargs=env_kwargs,
        num_problems=publish_args.card_eval_problems,
        samples_per_problem=publish_args.card_eval_samples,
        temperature=temperature,
        max_tokens=budget.max_tokens_per_turn,
        max_turns=budget.max_turns,
        max_tokens_per_trajectory=budget.max_tokens_per_trajectory,
        seed=publish_args.card_eval_seed,
        device=str(trainer.accelerator.device),
        max_context_tokens=getattr(args, "max_context_tokens", None),
        at_most=True,  # card_eval_problems bounds the count: a smaller test split is played whole, each problem once
    )
    results = {}
    episodes = publish_args.card_eval_problems * publish_args.card_eval_samples
    progress = show_progress(getattr(publish_args, "progress", None))
    for name, model in (("before", base_model), ("after", output_dir)):
        print(
            f"[trl_envs] model card: evaluating the model {name} training on {env} ({publish_args.card_eval_problems} "
            f"test problems x {publish_args.card_eval_samples} samples = {episodes} episodes; --card_eval false "
            "skips it)",
            flush=True,
        )
        results[name] = evaluate_model(model, env, **common, progress=progress)
        if results[name].num_problems != settings["problems"]:  # the split held fewer: report what was played
            settings["problems"] = results[name].num_problems
            settings["command"] = settings["command"].replace(
                f"--num_problems {publish_args.card_eval_problems}", f"--num_problems {results[name].num_problems}"
            )
        print(f"[trl_envs] {env} test problems, {name} training:\n{results[name].format_table()}")
    with open(os.path.join(output_dir, "eval_results.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "env": env,
                "env_kwargs": env_kwargs,
                "settings": settings,
                "base_model": base_model,
                **{name: r.to_dict() for name, r in results.items()},
            },
            f,
            indent=2,
        )
        f.write("\n")
    return results["before"], results["after"], settings


def show_progress(asked: bool | None) -> bool:
    """Whether to draw progress bars: as ``asked``, else (``None``) when stderr or stdout is a terminal."""
    from ..terminal import on_terminal

    return asked if asked is not None else on_terminal()


def _write_config(output_dir, algorithm, base_model, envs, env_kwargs, args, script_args, model_args, push) -> None:
    config = {
        "algorithm": algorithm,
        "base_model": base_model,
        "envs": list(envs),
        "env_kwargs": env_kwargs,
        "push_to_hub": push,
        **{
            name: dataclasses.asdict(a) if dataclasses.is_dataclass(a) else a
            for name, a in (("script_args", script_args), ("model_args", model_args))
        },
        "training_args": json.loads(args.to_json_string()),
    }
    with open(os.path.join(output_dir, "training_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, default=str)
        f.write("\n")
