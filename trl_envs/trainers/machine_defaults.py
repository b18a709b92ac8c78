"""``use_cpu`` and ``bf16`` chosen from the machine when the user leaves them unset, as the training scripts choose.

TRL's configs default ``bf16`` to ``True`` and ``use_cpu`` to ``False``, so a config built in Python on a machine
without a GPU raised transformers' ``Your setup doesn't support bf16/gpu`` until both were set by hand.
:class:`MachineDefaults`, mixed into the env trainers' configs, leaves both unset and fills what is unset from the
machine: on CPU when there is no CUDA GPU, in bf16 where the GPU has it (``fp16=True`` keeps bf16 off). It says once
per process what it chose for the user; a value given explicitly always wins.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

ANNOUNCED: set[str] = set()
"""The lines already said in this process (each is said once)."""


@dataclass
class MachineDefaults:
    """``use_cpu`` (default: on when the machine has no CUDA GPU) and ``bf16`` (default: on where the GPU supports
    it, unless ``fp16``)."""

    use_cpu: bool | None = field(
        default=None,
        metadata={"help": "Train on the CPU (default: when this machine has no CUDA GPU, as the scripts choose)."},
    )
    bf16: bool | None = field(
        default=None,
        metadata={"help": "bfloat16 mixed precision (default: where the GPU supports it and fp16 is off; off on CPU)."},
    )

    def __post_init__(self):
        import torch

        cuda = torch.cuda.is_available()
        chosen = {}
        if self.use_cpu is None:
            self.use_cpu = chosen["use_cpu"] = not cuda
        if self.bf16 is None:
            bf16 = not self.fp16 and not self.use_cpu and cuda and torch.cuda.is_bf16_supported()
            self.bf16 = chosen["bf16"] = bf16
        if not cuda and chosen:
            line = ", ".join(f"{name}={value}" for name, value in chosen.items())
            if line not in ANNOUNCED:
                ANNOUNCED.add(line)
                logger.warning(
                    "%s: no CUDA GPU on this machine, so %s (as the training scripts choose); set them to choose "
                    "yourself",
                    type(self).__name__,
                    line,
                )
        super().__post_init__()
