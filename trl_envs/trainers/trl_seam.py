"""The one module that touches TRL's private names (see docs/DESIGN.md). Each use names the TRL 1.16 behaviour it
relies on, so a TRL upgrade that changes it breaks here, in one place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from accelerate.utils import gather_object


def record_mean_metrics(trainer, mode: str, metrics: Mapping[str, Sequence[float]]) -> None:
    """Append, for each metric, the mean of its samples over all processes to the values TRL logs, with ONE
    gather for all metrics (TRL's ``_pending_metrics`` path gathers once per metric name, per step).

    Relies on: ``GRPOTrainer._metrics[mode][name]`` is a list whose mean over the logging window TRL logs as
    ``name`` (TRL 1.16 ``GRPOTrainer.log``). Every process must call it at the same point (it is a collective when
    there are several); names may differ between processes (a name missing on one counts no samples there).
    """
    accelerator = trainer.accelerator
    names = sorted(metrics)
    if accelerator.num_processes > 1:
        names = sorted({n for rank_names in gather_object([names]) for n in rank_names})
    if not names:
        return
    local = torch.tensor([[float(sum(metrics.get(n, ()))), float(len(metrics.get(n, ())))] for n in names],
                         dtype=torch.float64)
    if accelerator.num_processes > 1:
        local = accelerator.gather(local.to(accelerator.device)).view(-1, len(names), 2).sum(0).cpu()
    for name, (total, count) in zip(names, local.tolist()):
        if count:
            trainer._metrics[mode][name].append(total / count)
