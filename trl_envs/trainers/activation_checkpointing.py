"""The names transformers 5 expects for activation (gradient) checkpointing, with TRL's default kept.

TRL's configs default ``gradient_checkpointing`` to ``True``; transformers 5 renamed the setting
``activation_checkpointing`` and warns (``FutureWarning``) whenever the old name holds a value, so every run of a TRL
config warned, whatever the user set. :class:`ActivationCheckpointing`, mixed into the env trainers' configs, leaves
both names unset and applies TRL's default (on) under the new name when neither is given: nothing warns unless the
user writes the old name (``gradient_checkpointing=False`` still works, with transformers' warning naming the new one).
With a transformers older than the new name (before 5.23), the setting is passed under the old name.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field


@dataclass
class ActivationCheckpointing:
    """``activation_checkpointing`` (default: on, TRL's default: recompute activations in the backward pass to save
    memory) and ``gradient_checkpointing``, its old name; either may be set."""

    activation_checkpointing: bool | None = field(
        default=None,
        metadata={
            "help": "Recompute activations in the backward pass to save memory (default: on, as TRL's "
            "gradient_checkpointing). transformers' new name of gradient_checkpointing."
        },
    )
    gradient_checkpointing: bool | None = field(
        default=None,
        metadata={"help": "Old name of activation_checkpointing (transformers warns when it is used)."},
    )

    def __post_init__(self):
        if self.activation_checkpointing is None and self.gradient_checkpointing is None:
            self.activation_checkpointing = True  # TRL's default, under the name transformers expects
        if not transformers_has_activation_checkpointing() and self.activation_checkpointing is not None:
            # transformers before 5.23 reads only the old name: the setting goes there, or it would do nothing
            self.gradient_checkpointing = self.activation_checkpointing
        super().__post_init__()


@functools.cache
def transformers_has_activation_checkpointing() -> bool:
    """Whether the installed transformers' ``TrainingArguments`` has ``activation_checkpointing`` (5.23 and later);
    older releases read only ``gradient_checkpointing``."""
    from transformers import TrainingArguments

    return "activation_checkpointing" in {f.name for f in dataclasses.fields(TrainingArguments)}
