"""``trl-envs grpo ARGS`` / ``trl-envs dpo ARGS``: the training scripts as subcommands, as ``trl grpo`` is TRL's.

``trl-envs grpo ARGS`` runs ``scripts/train_grpo.py ARGS`` (``dpo``: ``scripts/train_dpo.py``) exactly as
``python scripts/train_grpo.py ARGS`` would, in this process, so ``accelerate launch $(which trl-envs) grpo ...`` works
too. The scripts are found in the source tree next to the installed package (a clone installed with
``pip install -e .``); ``TRL_ENVS_SCRIPTS`` names another folder holding them.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

SCRIPTS = {"grpo": "train_grpo.py", "dpo": "train_dpo.py"}


def script_path(command: str) -> Path:
    """The script of ``command`` (``grpo`` / ``dpo``).

    Raises:
        FileNotFoundError: not found (the message says where it looked and what to do).
    """
    folders = [Path(os.environ["TRL_ENVS_SCRIPTS"])] if os.environ.get("TRL_ENVS_SCRIPTS") else []
    folders.append(Path(__file__).resolve().parents[2] / "scripts")
    for folder in folders:
        if (folder / SCRIPTS[command]).is_file():
            return folder / SCRIPTS[command]
    raise FileNotFoundError(
        f"trl-envs {command}: {SCRIPTS[command]} not found in {', '.join(map(str, folders))}; "
        "install trl_envs from a clone (pip install -e .) or set TRL_ENVS_SCRIPTS to the folder "
        "holding the scripts"
    )


def run(command: str, argv: list[str]) -> int:
    """Run the script of ``command`` with ``argv`` as its command line; return its exit status."""
    path = script_path(command)
    saved = sys.argv[:]
    from .training_script import TYPED_COMMAND

    sys.argv = [str(path), *argv]
    TYPED_COMMAND.append(f"trl-envs {command}")  # what the script's usage line and errors call the command
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved
        TYPED_COMMAND.pop()
    return 0
