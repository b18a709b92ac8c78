"""Resuming runs: which checkpoint ``resume_from_checkpoint`` means, and the random state a checkpoint keeps.

``resume_from_checkpoint`` (the ``TrainingArguments`` field and the scripts' ``--resume_from_checkpoint``) takes a
checkpoint folder, or ``True`` / ``"true"`` / ``"last"`` for the newest complete ``checkpoint-*`` folder of
``output_dir`` (one with its completion marker, see :mod:`~trl_envs.trainers.checkpoints`; incomplete ones are skipped
and named); ``None`` / ``False`` / ``""`` / ``"false"`` start afresh. :func:`resolve_checkpoint` turns that into a
folder it has checked, or fails before any model is loaded.
"""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import torch

from .checkpoints import CheckpointError, last_complete_checkpoint, verify_checkpoint

_LAST = ("true", "last")
_NONE = ("", "false", "none", "no")


def resolve_checkpoint(
    value: str | bool | None, output_dir: str | None, option: str = "resume_from_checkpoint"
) -> str | None:
    """The checkpoint folder ``value`` names (see the module docstring), or ``None`` to start afresh.

    Raises:
        ValueError: ``value`` names a folder that does not exist, or asks for the last checkpoint of an ``output_dir``
            that has no complete one. CheckpointError (a ``ValueError``): the checkpoint's ``trainer_state.json`` or a
            ``*.safetensors`` file is missing or corrupted (named).
    """
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() in _NONE):
        return None
    if value is True or (isinstance(value, str) and value.strip().lower() in _LAST):
        last = last_complete_checkpoint(output_dir) if output_dir and os.path.isdir(output_dir) else None
        if last is None:
            raise CheckpointError(
                f"{option}={value!r} asks for the last checkpoint of output_dir {output_dir!r}, but "
                "it holds no checkpoint-* folder with its completion marker (checkpoints are "
                "written with save_strategy='steps' / 'epoch')"
            )
        verify_checkpoint(last)
        print(f"[trl_envs] resuming from {last} (the newest complete checkpoint)", flush=True)
        return last
    path = os.fspath(value)
    if not os.path.isdir(path):
        raise ValueError(f"{option}={path!r}: no such checkpoint folder")
    verify_checkpoint(path)
    return path


def rng_state() -> dict[str, Any]:
    """This process's random state: Python, NumPy, torch CPU (and CUDA when available)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore a state returned by :func:`rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def resume_option(training_args) -> str | None:
    """The scripts' ``--resume_from_checkpoint`` resolved with :func:`resolve_checkpoint` against ``output_dir``: a
    checkpoint folder, ``None`` for a fresh run, or ``ValueError`` naming the option."""
    return resolve_checkpoint(
        training_args.resume_from_checkpoint, training_args.output_dir, "--resume_from_checkpoint"
    )
