"""Out of memory, said once, with the settings that lower memory for the phase that ran out.

:func:`name_out_of_memory` turns a ``torch.OutOfMemoryError`` escaping ``train()`` into an :class:`OutOfMemory` (a
:class:`~trl_envs.errors.types.RunFailed`: the commands print its one line and exit 1, without a traceback). The phase
is read from where the error was raised: inside a ``generate`` call (the trainer's sampler, or the sampler process of
``max_staleness >= 1``, whose errors arrive with a ``SamplerProcessError`` cause) it is generation; anywhere else, the
training step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ..errors.types import RunFailed

GENERATION_KNOBS = (
    "fewer rows per generate call (per_device_train_batch_size, generation_batch_size), "
    "fewer tokens per turn (max_completion_length) or per episode (max_context_tokens), "
    "a smaller group (num_generations), "
    "and max_staleness 0 (the sampler process of max_staleness >= 1 holds its own copy of the policy)"
)
TRAINING_KNOBS = (
    "fewer rows per micro-batch (per_device_train_batch_size, with gradient_accumulation_steps raised to keep the "
    "step's rows), activation_checkpointing true, fewer tokens per turn (max_completion_length) or per episode "
    "(max_context_tokens), a smaller group (num_generations), "
    "and max_staleness 0 (the sampler process of max_staleness >= 1 holds its own copy of the policy)"
)


class OutOfMemory(RunFailed):
    """The accelerator (or the host) ran out of memory in generation or in the training step (the message names the
    settings that lower memory for that phase)."""


def phase_of(error: BaseException) -> str:
    """``"generation"`` when ``error`` was raised inside a ``generate`` call (or in the sampler process), else
    ``"the training step"``."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "SamplerProcessError":  # the sampler process's own traceback, as text
            return "generation"
        tb = current.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_name == "generate" or code.co_filename.replace("\\", "/").endswith("samplers/hf.py"):
                return "generation"
            tb = tb.tb_next
        current = current.__cause__ or current.__context__
    return "the training step"


def out_of_memory_message(error: BaseException, step: int | None = None) -> str:
    """The one-line message for ``error`` (a ``torch.OutOfMemoryError``)."""
    phase = phase_of(error)
    knobs = GENERATION_KNOBS if phase == "generation" else TRAINING_KNOBS
    at = f" at step {step}" if step is not None else ""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return f"out of memory in {phase}{at}. To lower it: {knobs}. (torch: {first})"


@contextlib.contextmanager
def name_out_of_memory(step=lambda: None) -> Iterator[None]:
    """Raise :class:`OutOfMemory` (from the original) for a ``torch.OutOfMemoryError`` raised inside; ``step()`` is the
    step it happened at, for the message."""
    try:
        yield
    except torch.OutOfMemoryError as error:
        raise OutOfMemory(out_of_memory_message(error, step())) from error


__all__ = ["OutOfMemory", "name_out_of_memory", "out_of_memory_message", "phase_of"]
