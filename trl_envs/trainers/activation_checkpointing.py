"""The names transformers 5 expects for activation (gradient) checkpointing, with TRL's default kept.

TRL's configs default ``gradient_checkpointing`` to ``True``; transformers 5 renamed the setting
``activation_checkpointing`` and warns (``FutureWarning``) whenever the old name holds a value, so every run of a TRL
config warned, whatever the user set. :class:`ActivationCheckpointing`, mixed into the env trainers' configs, moves
TRL's default to the new name: nothing warns unless the user writes the old name (``--gradient_checkpointing``, which
still works, with transformers' warning naming the new one).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ActivationCheckpointing:
    """``activation_checkpointing`` on by default (TRL's default: recompute activations in the backward pass to save
    memory), ``gradient_checkpointing`` its old name, unset."""

    activation_checkpointing: bool | None = field(
        default=True,
        metadata={
            "help": "Recompute activations in the backward pass to save memory (TRL's default: on). transformers' "
            "new name of gradient_checkpointing."
        },
    )
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={"help": "Old name of activation_checkpointing (transformers warns when it is used)."},
    )
