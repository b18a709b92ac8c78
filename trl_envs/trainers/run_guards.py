"""What an env trainer's ``train()`` checks first and runs under: :class:`RunGuards`, held by the trainer.

* The checkpoint to resume from (:meth:`RunGuards.checkpoint`): complete and readable, written with this run's settings
  unless ``args.resume_allow_changes`` (see :mod:`~trl_envs.trainers.checkpoints`).
* While training (:meth:`RunGuards.running`): ``output_dir``'s lock; a full disk while a checkpoint is written, and
  running out of memory, each turned into one line naming the cause
  (:func:`~trl_envs.trainers.checkpoints.name_disk_full`, :mod:`~trl_envs.trainers.out_of_memory`).
* Every checkpoint the Trainer saves is marked complete, with the run's settings, once written
  (:class:`~trl_envs.trainers.checkpoints.CheckpointMarker`).
"""

from __future__ import annotations

import contextlib
from typing import Any

from .checkpoints import (
    CheckpointMarker,
    check_resume_settings,
    hold_output_dir,
    name_disk_full,
    run_settings,
    verify_checkpoint,
)
from .out_of_memory import name_out_of_memory
from .resume import resolve_checkpoint


class RunGuards:
    """The checks and guards of one trainer's runs (module docstring). Build it after the TRL trainer's ``__init__``
    (it adds the checkpoint marker as a callback).

    Args:
        trainer: the TRL trainer (its ``args``, ``state`` and ``add_callback``).
        model: the model as given to the trainer (its id or class names the run's model).
        env: the name of the run's env (e.g. its builder's class), or ``None`` (offline DPO).

    Attributes:
        settings: the run's settings a checkpoint is written with and a resume is checked against
            (:func:`~trl_envs.trainers.checkpoints.run_settings`).
    """

    def __init__(self, trainer, model: Any, env: str | None):
        self.trainer = trainer
        self.settings = run_settings(trainer.args, model, env)
        self.marker = CheckpointMarker(self.settings)
        trainer.add_callback(self.marker)

    def checkpoint(self, resume_from_checkpoint) -> str | None:
        """The checkpoint ``resume_from_checkpoint`` names (a folder, or ``True`` / ``"last"`` for the newest complete
        one), checked; ``None`` for a fresh start. Raises ``CheckpointError`` naming what is wrong."""
        args = self.trainer.args
        checkpoint = resolve_checkpoint(resume_from_checkpoint, args.output_dir)
        if checkpoint is not None:
            check_resume_settings(
                checkpoint,
                verify_checkpoint(checkpoint),
                self.settings,
                getattr(args, "resume_allow_changes", False),
            )
        return checkpoint

    def running(self) -> contextlib.AbstractContextManager:
        """What ``train()`` runs under: ``output_dir``'s lock, a full disk named, running out of memory named."""
        trainer = self.trainer
        stack = contextlib.ExitStack()
        stack.enter_context(hold_output_dir(trainer.args.output_dir))
        stack.enter_context(name_disk_full(trainer.args.output_dir, self.marker))
        stack.enter_context(name_out_of_memory(lambda: trainer.state.global_step + 1))
        return stack


__all__ = ["RunGuards"]
