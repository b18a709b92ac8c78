"""A small offline preference dataset built from the ``arithmetic`` env: right answers chosen, wrong ones rejected.

Each row is a conversational DPO example, exactly the format TRL's ``DPOTrainer`` takes::

    {"prompt":   [{"role": "user", "content": "What is 3 + 4?"}],
     "chosen":   [{"role": "assistant", "content": "Let's add: 3 + 4 = 7"}],
     "rejected": [{"role": "assistant", "content": "8"}],
     "chosen_reward": 1.0, "rejected_reward": 0.0}

The question is the env's own question; the answers are in the demo model's two styles
(:mod:`trl_envs.tiny_model`): the chosen one is the worked sum (always right), the rejected one a quick near miss (a
bare number, the sum plus or minus 1..2, never negative): chosen bare numbers would also reward the quick style,
which is mostly wrong on new questions (docs/benchmarks.md). Both are checked with
:class:`~trl_envs.envs.arithmetic.ArithmeticEnv` (``check_answer`` / ``check_format``), and the rewards columns are what
the env would pay for them. The questions are split as the arithmetic recipes split them
(:func:`~trl_envs.envs.arithmetic.split_problems` with :data:`HELD_OUT_FRACTION`): the ``train`` split asks only
training questions, the ``test`` split only held-out ones, so the arithmetic env's held-out test set measures questions
offline DPO never saw.

The dataset ships with the package (``trl_envs/assets/arithmetic-preferences-v2``, a ``datasets.DatasetDict`` saved
with ``save_to_disk``): :func:`load_preference_dataset` loads it from there, and
``python -m trl_envs.training_data.preference_data`` prints its path. :func:`build_preference_dataset` builds it again
(well under a second, no network; the same rows on every machine) into ``$TRL_ENVS_CACHE`` (default
``~/.cache/trl_envs``) or a folder given, for other sizes or seeds: ``python -m trl_envs.training_data.preference_data
--build [--num_train N] [--seed S] [--output_dir DIR]``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

DATASET_NAME = "arithmetic-preferences-v2"
"""Name of the default cache directory; bump the version when the recipe changes."""

HELD_OUT_FRACTION = 0.2
"""The share of the questions only in the ``test`` split (``held_out_fraction`` of the arithmetic recipes)."""

MAX_OPERAND = 9
"""The questions' operands are ``0..MAX_OPERAND`` (the demo model's arithmetic)."""

HELD_OUT_ENV_KWARGS = {"max_operand": MAX_OPERAND, "held_out_fraction": HELD_OUT_FRACTION}
"""The ``arithmetic`` env options whose test set asks exactly the questions the ``train`` split leaves out (the model
card of a run on this dataset is scored on them)."""

MARKER_FILE = "BUILD_COMPLETE"
NUM_TRAIN, NUM_TEST = 512, 64


def shipped_preference_dataset_path() -> str:
    """The directory of the dataset that ships with the package (``trl_envs/assets/arithmetic-preferences-v2``)."""
    path = Path(__file__).resolve().parent.parent / "assets" / DATASET_NAME
    if not (path / MARKER_FILE).is_file():
        raise FileNotFoundError(f"preference_data: the shipped dataset is missing from {path}; reinstall trl-envs")
    return str(path)


def default_preference_dataset_path() -> str:
    """``$TRL_ENVS_CACHE/arithmetic-preferences-v2`` (``TRL_ENVS_CACHE`` defaults to ``~/.cache/trl_envs``)."""
    cache = os.environ.get("TRL_ENVS_CACHE") or os.path.join("~", ".cache", "trl_envs")
    return os.path.join(os.path.expanduser(cache), DATASET_NAME)


def arithmetic_preference_rows(
    num: int, *, seed: int = 0, max_operand: int = MAX_OPERAND, held_out: bool = False
) -> list[dict[str, Any]]:
    """``num`` preference rows (see the module docstring) on the training questions (``held_out``: on the held-out
    ones); fixed by ``seed``."""
    from ..envs.arithmetic import ArithmeticEnv, question, split_problems, worked_sum

    rng = random.Random(f"arithmetic-preferences/{seed}")
    problems = split_problems(max_operand, HELD_OUT_FRACTION)[int(held_out)]
    rows = []
    for _ in range(num):
        a, b = rng.choice(problems)
        env = ArithmeticEnv(None, a, b)  # the renderer is only needed to play the env, not to check answers
        delta = rng.choice([-2, -1, 1, 2])
        wrong = a + b + delta if a + b + delta >= 0 else a + b - delta
        chosen, rejected = worked_sum(a, b), str(wrong)
        assert env.check_answer(chosen) and not env.check_answer(rejected)
        rows.append(
            {
                "prompt": [{"role": "user", "content": question(a, b)}],
                "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": rejected}],
                "chosen_reward": _reward(env, chosen),
                "rejected_reward": _reward(env, rejected),
            }
        )
    return rows


def _reward(env, text: str) -> float:
    """What :class:`~trl_envs.core.problem_env.ProblemEnv` pays for ``text`` ended by the end-of-turn token."""
    return env.format_coef * (float(env.check_format(text)) - 1.0) + float(env.check_answer(text))


def build_preference_dataset(
    output_dir: str | None = None,
    *,
    num_train: int = NUM_TRAIN,
    num_test: int = NUM_TEST,
    seed: int = 0,
    force: bool = False,
) -> str:
    """Build the dataset (``train``: ``num_train`` rows, ``test``: ``num_test`` rows on the held-out questions) into
    ``output_dir`` (default :func:`default_preference_dataset_path`) and return the path. A finished build there is
    reused as is (whatever its sizes) unless ``force``. Safe to call from several processes at once."""
    from datasets import Dataset, DatasetDict

    target = Path(output_dir or default_preference_dataset_path()).expanduser().resolve()
    if not force and (target / MARKER_FILE).is_file():
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
    try:
        DatasetDict(
            {
                "train": Dataset.from_list(arithmetic_preference_rows(num_train, seed=seed)),
                "test": Dataset.from_list(arithmetic_preference_rows(num_test, seed=seed + 10_000, held_out=True)),
            }
        ).save_to_disk(str(staging / "data"))
        (staging / "data" / MARKER_FILE).write_text(f"seed={seed} train={num_train} test={num_test}\n")
        if force and target.exists():
            shutil.rmtree(target)
        try:
            os.rename(staging / "data", target)
        except OSError:  # another process finished first: use its build
            if not (target / MARKER_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(target)


def load_preference_dataset(path: str | None = None):
    """The ``DatasetDict`` (``train``, ``test``) at ``path``, by default the shipped one
    (:func:`shipped_preference_dataset_path`).

    The shipped one is read into memory: a ``map`` on it (TRL's tokenization) then writes no cache files into the
    installed package, which may be read-only and is never the user's to fill."""
    from datasets import load_from_disk

    if path is None:
        return load_from_disk(shipped_preference_dataset_path(), keep_in_memory=True)
    return load_from_disk(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m trl_envs.training_data.preference_data", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--build", action="store_true", help="build it (default: print the shipped dataset's path)")
    parser.add_argument(
        "--output_dir", default=None, help=f"with --build (default: {default_preference_dataset_path()})"
    )
    parser.add_argument("--num_train", type=int, default=NUM_TRAIN)
    parser.add_argument("--num_test", type=int, default=NUM_TEST)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="rebuild even if a finished build is there")
    args = parser.parse_args(argv)
    if not args.build:
        print(shipped_preference_dataset_path())
        return
    print(
        build_preference_dataset(
            args.output_dir, num_train=args.num_train, num_test=args.num_test, seed=args.seed, force=args.force
        )
    )


if __name__ == "__main__":
    main()
