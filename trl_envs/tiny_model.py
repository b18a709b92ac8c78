"""The tiny ChatML chat models that ship with the package, for tests, examples and smoke runs.

:func:`tiny_model_path` returns the directory of a Hugging Face model that loads with
``AutoTokenizer.from_pretrained`` / ``AutoModelForCausalLM.from_pretrained``. Two models, by name:

* ``tiny-chat-v5`` (:data:`DEMO_MODEL_NAME`), the demo model of the scripts, ``trl-envs play`` / ``eval`` /
  ``build-tiny-model``: a two-layer ``Qwen2ForCausalLM`` (float32, output layer untied from the embeddings)
  warm-started on weighted demonstrations of ``arithmetic`` (bare and worked sums) and ``guess_number`` (including
  halving games), so that, sampled at temperature 1, it is right only some of the time (its ``build.json`` gives the
  figures): GRPO has a signal on every question;
* ``tiny-chat-v1`` (:data:`MODEL_NAME`), the tests' model and this module's default: smaller, tied embeddings,
  warm-started just enough that it answers with a bare number and ``<|im_end|>`` and is right only some of the time.

Both have a byte-level BPE tokenizer of a few hundred tokens (every digit is its own token) with the special tokens
``<|im_start|>``, ``<|im_end|>`` (EOS, end of turn) and ``<|endoftext|>`` (padding), and a Qwen-style ChatML chat
template (``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, generation prompt ``<|im_start|>assistant\\n``,
no default system message).

The models are package data (``trl_envs/assets/<name>/``, under 1 MB each), versioned with the code: every install
trains from the same weights, and nothing is built or downloaded on first use. They were built on a CPU by the
maintainers' builder, ``scripts/tiny_models/build_tiny_models.py`` in the source repository (not part of the
installed package); ``build.json`` next to the weights records how (seed, recipe, build time, the warm start's
evaluation, the sha256 of every file).

Command line: ``python -m trl_envs.tiny_model [--name NAME] [--output_dir DIR [--force]]`` prints the directory
(with ``--output_dir``: of a copy made there).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

from .model_names import DEMO_MODEL_NAME, MODEL_NAME, MODEL_NAMES

ASSETS = Path(__file__).resolve().parent / "assets"
"""The package-data folder of the shipped models (and of the built-in preference dataset)."""

BUILD_RECORD = "build.json"
"""The file next to a shipped model's weights that records how it was built."""

SHIPPED_SEED = 0
"""The seed the shipped models were built with."""


def _check_name(name: str) -> None:
    if name not in MODEL_NAMES:
        raise ValueError(f"tiny_model: unknown model name {name!r}; known: {', '.join(MODEL_NAMES)}")


def tiny_model_path(name: str = MODEL_NAME) -> str:
    """The directory of the shipped model ``name`` (default ``tiny-chat-v1``; :data:`DEMO_MODEL_NAME` is the demo
    model). Raises ``FileNotFoundError`` naming the folder if the installation lacks it."""
    _check_name(name)
    path = ASSETS / name
    if not (path / BUILD_RECORD).is_file():
        raise FileNotFoundError(
            f"tiny_model: the shipped model {name} is missing from {path}; reinstall trl-envs "
            "(in a source checkout, scripts/tiny_models/build_tiny_models.py rebuilds it)"
        )
    return str(path)


def build_record(name: str = MODEL_NAME) -> dict:
    """How the shipped model ``name`` was built: its ``build.json`` (name, seed, recipe, ``build_seconds``,
    ``warm_start_eval``, ``sha256`` of every file, the library versions and machine of the build)."""
    return json.loads((Path(tiny_model_path(name)) / BUILD_RECORD).read_text())


def build_tiny_model(
    output_dir: str | None = None, *, force: bool = False, seed: int = SHIPPED_SEED, name: str = MODEL_NAME
) -> str:
    """The directory of the tiny model ``name``: the shipped one (:func:`tiny_model_path`), or, given ``output_dir``,
    a copy of it there (for a model folder of one's own to change). Nothing is built: the models ship with the
    package; the name is the command's, ``trl-envs build-tiny-model``.

    A copy already in ``output_dir`` is returned as is; ``force=True`` replaces it. ``seed`` must be the shipped
    models' seed (0): a model of another seed is built with the maintainers' builder in the source repository.

    Raises:
        FileExistsError: ``output_dir`` is a non-empty directory that is not a copy of this model (and not ``force``);
            it is never deleted in that case.
        ValueError: an unknown ``name``, or a ``seed`` other than the shipped one.
    """
    source = Path(tiny_model_path(name))
    if seed != SHIPPED_SEED:
        raise ValueError(
            f"tiny_model: the shipped {name} is built with seed {SHIPPED_SEED}, not {seed}; to build another, run "
            f"`python scripts/tiny_models/build_tiny_models.py --name {name} --seed {seed} --output_dir DIR` "
            "in the source repository"
        )
    if output_dir is None:
        return str(source)
    target = Path(output_dir).expanduser().resolve()
    record = (source / BUILD_RECORD).read_text()
    if not force and (target / BUILD_RECORD).is_file():
        if (target / BUILD_RECORD).read_text() == record:
            return str(target)
        if _holds_the_files(target, json.loads(record)["sha256"]):  # a copy made when the record said less
            (target / BUILD_RECORD).write_text(record)
            return str(target)
    if not force and target.exists() and not (target.is_dir() and not any(target.iterdir())):
        raise FileExistsError(
            f"build_tiny_model: {target} exists, is not empty and holds no copy of {name}; "
            "remove it, pick another directory, or pass force=True to replace it"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.copying-", dir=target.parent))
    try:
        shutil.copytree(source, staging / name)
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        os.replace(staging / name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return str(target)


def _holds_the_files(directory: Path, sha256: dict[str, str]) -> bool:
    """Whether ``directory`` holds each file of ``sha256`` (name -> hex digest) with that content."""
    import hashlib

    return all(
        (directory / name).is_file() and hashlib.sha256((directory / name).read_bytes()).hexdigest() == digest
        for name, digest in sha256.items()
    )


def main(argv: list[str] | None = None) -> None:
    """``python -m trl_envs.tiny_model [--name NAME] [--output_dir DIR] [--force]``: print the model's directory."""
    parser = argparse.ArgumentParser(prog="python -m trl_envs.tiny_model", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output_dir", default=None, help="copy the model there (default: print the shipped one)")
    parser.add_argument("--force", action="store_true", help="replace what is in --output_dir")
    parser.add_argument("--seed", type=int, default=SHIPPED_SEED, help=argparse.SUPPRESS)
    parser.add_argument("--name", default=DEMO_MODEL_NAME, choices=MODEL_NAMES, help="the model (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        print(build_tiny_model(args.output_dir, force=args.force, seed=args.seed, name=args.name))
    except (FileExistsError, FileNotFoundError, ValueError) as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")


if __name__ == "__main__":
    main()
