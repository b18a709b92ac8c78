"""The trainer's seed for an env dataset builder that was given none.

An :class:`~trl_envs.core.types.RLDatasetBuilder` whose ``seed`` picks the training problems and their order would
give every training seed the same problem sequence if the seed stayed at the builder's default. The trainers call
:func:`seed_dataset_builder` on the builder they are given:

* a dataclass builder whose ``seed`` field is ``None`` (the built-in envs' default: "the trainer's seed") gets a
  copy with ``seed`` set to the trainer's ``args.seed``;
* a dataclass builder whose ``seed`` is its field's (non-``None``) default while the trainer's seed differs keeps
  it, with a warning that names the builder, since the user may have chosen that value;
* anything else is returned as it is.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any


def seed_dataset_builder(builder: Any, seed: int, owner: str) -> Any:
    """``builder``, or a copy of it whose unset ``seed`` is ``seed`` (see the module docstring); ``owner`` names the
    trainer in the warning."""
    if not dataclasses.is_dataclass(builder) or isinstance(builder, type):
        return builder
    fields = {f.name: f for f in dataclasses.fields(builder)}
    if "seed" not in fields:
        return builder
    value = builder.seed
    if value is None:
        return dataclasses.replace(builder, seed=seed)
    default = fields["seed"].default
    if value == default and value != seed:
        warnings.warn(
            f"{owner}: {type(builder).__name__}.seed is its default {value!r} while the trainer's seed is "
            f"{seed}: every training seed gets the same problem sequence. Pass "
            f"{type(builder).__name__}(..., seed=...) to vary it.",
            UserWarning,
            stacklevel=3,
        )
    return builder
