"""The ``trl-envs`` command: ``grpo``, ``dpo``, ``list``, ``play``, ``eval``, ``show``, ``build-tiny-model``.

    trl-envs grpo --env guess_number                # = python scripts/train_grpo.py --env guess_number
    trl-envs dpo --config scripts/configs/dpo_env_arithmetic.yaml

    trl-envs list                                   # the envs you can name
    trl-envs play guess_number                      # play an env by hand, typing the model's answers
    trl-envs eval --model outputs/grpo-arithmetic --env arithmetic --samples_per_problem 8
    trl-envs show outputs/grpo-arithmetic           # the episodes a training run traced (terminal + HTML page)
    trl-envs build-tiny-model                       # build (or find) the offline demo model; prints its path

``trl-envs COMMAND --help`` explains each command's options.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from ..model_names import DEMO_MODEL_NAME, MODEL_NAME, MODEL_NAMES  # names only: the builder is imported when used
from .play import PLAY_LOST

EPILOG = "Run 'trl-envs COMMAND --help' for the options of a command."
KINDS = ("builtin", "reasoning_gym", "textarena", "pettingzoo", "skyrl_gym", "verifiers", "plugin")
"""What ``trl-envs list --kind`` filters on: the built-in envs, a family of another library, or the other names
(registered or from installed packages)."""


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``trl-envs`` console script; returns the exit status."""
    from .quiet import quiet_run

    quiet_run()  # one line per warning; no noise that says nothing a user can act on
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] != ["--version"]:  # a TRL / transformers outside pyproject's ranges: one line, before TRL loads
        from ..errors.versions import EXIT_STATUS, IncompatibleVersionError, check_installed_versions

        try:
            check_installed_versions()
        except IncompatibleVersionError as e:
            if not needs_the_training_stack(argv):  # listing envs or reading help: say it, and go on
                print(f"trl-envs: warning: {e} (training, play and eval refuse until then)", file=sys.stderr)
            else:
                print(f"trl-envs: error: {e}", file=sys.stderr)
                return EXIT_STATUS
    if argv and argv[0] in ("grpo", "dpo"):  # the training scripts parse their own (many) options
        from .train import run

        try:
            return run(argv[0], argv[1:])
        except FileNotFoundError as e:
            print(e, file=sys.stderr)
            return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from .errors import STOPPED_RUN, run_command

    # A user mistake prints one line saying what to fix (no traceback); Ctrl-C and SIGTERM clean up and exit 130 / 143.
    return run_command(f"trl-envs {args.command}", lambda: args.run(args), lost=getattr(args, "lost", STOPPED_RUN))


def needs_the_training_stack(argv: list[str]) -> bool:
    """Whether the command ``argv`` names loads TRL or a model: training (``grpo``, ``dpo``, which parse their own
    options), ``play``, ``eval`` and ``build-tiny-model``, but not ``list`` or a help message."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in ("grpo", "dpo"):
        return True
    return command not in (None, "list") and not {"-h", "--help"} & set(argv)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``trl-envs`` with its subcommands."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="trl-envs",
        description="Train language models with RL on environments: inspect, play and evaluate envs and models.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"trl_envs {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    for name, script in (("grpo", "train_grpo.py"), ("dpo", "train_dpo.py")):
        commands.add_parser(
            name, help=f"train with {name.upper()}: scripts/{script} (trl-envs {name} --help)", add_help=False
        )

    p = commands.add_parser(
        "list",
        help="list the envs you can name",
        description="List the envs that "
        "`play`, `eval` and the training scripts know by name, with a one-line description.",
    )
    p.add_argument(
        "pattern",
        nargs="?",
        default=None,
        help="show only the envs whose name or description contains this text (case-insensitive), e.g. textarena",
    )
    p.add_argument(
        "--kind",
        choices=KINDS,
        default=None,
        help="show only the envs built into trl_envs ('builtin') or those of one family of another library",
    )
    p.add_argument("--json", action="store_true", help="print a JSON object {name: description}")
    p.set_defaults(run=_list)

    from .play import add_arguments as add_play_arguments

    p = commands.add_parser(
        "play",
        help="play an env by hand, typing the model's answers",
        description="Play one episode of an env by hand: you see the observation exactly as the model would (text "
        "with the chat template's special tokens) and type the model's answers; the end-of-turn token is "
        "added as if sampled. Then every step's reward and metrics and the total are printed. Answers can "
        "come from a pipe: printf '8\\n4\\n' | trl-envs play guess_number",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_play_arguments(p, env_positional=True)
    p.set_defaults(run=_play, lost=PLAY_LOST)

    p = commands.add_parser(
        "eval",
        help="evaluate a model or adapter on an env's test set",
        description="Play an env's test problems with a model (full model or PEFT adapter, path or Hub id) and "
        "report the mean and std of the episodes' total reward (as Stable-Baselines3's "
        "evaluate_policy), pass@k over the samples of each problem, and the same per logging tag. "
        "Prints a table and writes the numbers as JSON. Seeded: the same command gives the same numbers.",
    )
    _add_eval_arguments(p)
    p.set_defaults(run=_eval, lost="the evaluation was abandoned; no results written")

    p = commands.add_parser(
        "show",
        help="read a run's rollout traces (terminal and an HTML page)",
        description="Print the episodes a GRPO run traced (OUTPUT_DIR/rollouts/, written every logging_steps): "
        "every message with its role, the rewards per turn, the group reward, the total and the row "
        "layout; and write them all as one static HTML page.",
    )
    from .show import add_arguments as add_show_arguments

    add_show_arguments(p)
    p.set_defaults(run=_show, lost="nothing written after this point")

    p = commands.add_parser(
        "build-tiny-model",
        help="print the path of the offline demo chat model (it ships with trl_envs)",
        description=f"Print the directory of the demo model {DEMO_MODEL_NAME}, the tiny ChatML chat model of the "
        "default runs, `play` and `eval`, which ships with trl_envs (nothing is built or downloaded); with "
        "--output_dir, copy it there first.",
    )
    p.add_argument(
        "--output_dir",
        default=None,
        help="copy the model into this folder and print its path (default: print the shipped model's folder)",
    )
    p.add_argument(
        "--name",
        default=DEMO_MODEL_NAME,
        choices=list(MODEL_NAMES),
        help=f"{DEMO_MODEL_NAME}: the demo model; {MODEL_NAME}: the smaller model of the tests (default: %(default)s)",
    )
    p.add_argument("--force", action="store_true", help="replace what is in --output_dir")
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)  # the shipped models' seed only
    p.set_defaults(run=_build_tiny_model)
    return parser


def _add_eval_arguments(p: argparse.ArgumentParser) -> None:
    from ..registry.names import list_envs
    from .play import json_object

    p.add_argument(
        "--model",
        default=None,
        help=f"model or adapter: a directory or Hub id (default: the demo model {DEMO_MODEL_NAME})",
    )
    p.add_argument(
        "--env",
        default="arithmetic",
        help=f"env: {', '.join(list_envs(prefixed=False))}, "
        "reasoning_gym/<task>, textarena/<game>, pettingzoo/<family>/<game> or "
        "'package.module:factory' (default: arithmetic)",
    )
    p.add_argument(
        "--env_kwargs",
        type=json_object,
        default=None,
        help="env dataset options, a JSON object, e.g. '{\"max_operand\": 3}'",
    )
    p.add_argument("--split", default="test", choices=["test", "train"], help="which split to play (default: test)")
    p.add_argument(
        "--num_problems",
        type=int,
        default=None,
        help="problems (env groups) to play (default: the whole split as the env makes it)",
    )
    p.add_argument(
        "--samples_per_problem", type=int, default=4, help="episodes per problem, the n of pass@k (default: 4)"
    )
    p.add_argument(
        "--pass_k", type=int, nargs="+", default=None, help="the k of pass@k (default: 1 and --samples_per_problem)"
    )
    p.add_argument(
        "--success_threshold",
        type=float,
        default=0.0,
        help="an episode is solved when its total reward is above this (default: 0)",
    )
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0 is greedy (default: 1)")
    p.add_argument("--top_p", type=float, default=1.0)
    p.add_argument("--max_tokens", type=int, default=32, help="token budget of one action (default: 32)")
    p.add_argument(
        "--max_turns", type=_int_or_none, default=16, help="most actions per episode; 'none' for no limit (default: 16)"
    )
    p.add_argument(
        "--max_tokens_per_trajectory",
        type=_int_or_none,
        default=None,
        help="most sampled tokens per episode (default: no limit)",
    )
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument("--device", default=None, help="e.g. cpu, cuda, cuda:1 (default: cuda if available)")
    p.add_argument("--dtype", default=None, help="e.g. bfloat16 (default: the checkpoint's)")
    p.add_argument("--chunk_size", type=int, default=32, help="problems played at once; bounds memory (default: 32)")
    p.add_argument(
        "--output",
        default=None,
        help="JSON file for the results (default: evals/<env>-<split>.json in the model's folder, never the current "
        "directory; '' to write none)",
    )
    p.add_argument("--no_progress", action="store_true", help="no progress bar")


def _int_or_none(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'none', got {text!r}") from None


def _list(args: argparse.Namespace) -> int:
    from ..registry.names import list_envs

    envs = list_envs()
    if args.kind is not None:
        envs = {name: d for name, d in envs.items() if env_kind_of(name) == args.kind}
    if args.pattern:
        wanted = args.pattern.lower()
        envs = {name: d for name, d in envs.items() if wanted in name.lower() or wanted in d.lower()}
    if not envs:
        print(
            f"trl-envs list: no env matches{f' {args.pattern!r}' if args.pattern else ''}"
            f"{f' of kind {args.kind}' if args.kind else ''} (`trl-envs list` lists them all)",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(envs, indent=2))
        return 0
    width = max(map(len, envs), default=0)
    for name, description in envs.items():
        print(f"{name.ljust(width)}  {description}")
    return 0


def env_kind_of(name: str) -> str:
    """The :data:`KINDS` entry of an env name."""
    from ..envs import BUILTIN_ENVS

    if "/" in name:
        return name.split("/", 1)[0]
    return "builtin" if name in BUILTIN_ENVS else "plugin"


def _play(args: argparse.Namespace) -> int:
    from .play import play

    play(args)  # Ctrl-C and SIGTERM: one line, no traceback, status 130 / 143 (run_command)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from ..errors.preflight import check_hub_model, check_model_path, check_pass_k, check_sampling
    from ..hub.model_eval import evaluate_model
    from ..registry.names import get_env
    from ..tiny_model import tiny_model_path

    check_model_path(args.model, "--model")  # every check that needs no model, before loading it
    check_hub_model(args.model, "--model", revision=getattr(args, "revision", None))
    get_env(args.env)
    check_sampling(args.temperature, args.top_p)
    check_pass_k(args.pass_k, args.samples_per_problem)
    model = args.model or tiny_model_path(DEMO_MODEL_NAME)
    result = evaluate_model(
        model,
        args.env,
        env_kwargs=args.env_kwargs,
        split=args.split,
        num_problems=args.num_problems,
        samples_per_problem=args.samples_per_problem,
        ks=args.pass_k,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
        max_turns=args.max_turns,
        max_tokens_per_trajectory=args.max_tokens_per_trajectory,
        seed=args.seed,
        success_threshold=args.success_threshold,
        device=args.device,
        dtype=args.dtype,
        chunk_size=args.chunk_size,
        progress=not args.no_progress,
    )
    settings = {k: v for k, v in vars(args).items() if k not in ("run", "command", "no_progress", "output")}
    settings["model"] = model
    print(f"{model} on {args.env} ({args.split} split), temperature {args.temperature}, seed {args.seed}:")
    print(result.format_table())
    output = default_eval_output(args.model, args.env, args.split) if args.output is None else args.output
    if output:
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        result.to_json(output, settings=settings)
        print(f"wrote {output}")
    elif args.output is None:
        print("(--output FILE writes these results as JSON)")
    return 0


def default_eval_output(model: str | None, env: str, split: str) -> str | None:
    """Where `trl-envs eval` writes its JSON by default: ``evals/<env>-<split>.json`` in the folder given as
    ``--model`` (beside, not over, the ``eval_results.json`` of its training run); None for a Hub id or the demo
    model (no ``--model``), whose folder is a cache."""
    if not model or not os.path.isdir(model):
        return None
    return os.path.join(model, "evals", f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', env)}-{split}.json")


def _show(args: argparse.Namespace) -> int:
    from .show import show

    try:
        return show(args)
    except FileNotFoundError as e:
        print(f"trl-envs show: error: {e}", file=sys.stderr)
        return 2


def _build_tiny_model(args: argparse.Namespace) -> int:
    from ..tiny_model import build_tiny_model

    try:
        print(build_tiny_model(args.output_dir, force=args.force, seed=args.seed, name=args.name))
    except (FileExistsError, FileNotFoundError, ValueError) as e:
        print(f"trl-envs build-tiny-model: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
