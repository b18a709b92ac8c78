"""Rollout traces during training: every ``logging_steps``, a sample of the latest rollout's episodes per env tag.

:class:`RolloutTraceCallback` writes them (:func:`trl_envs.rollout.traces.trace_records`) to
``output_dir/rollouts/step_<N>.jsonl`` and logs them as a table named ``rollouts`` to the ``report_to`` trackers that
take tables: ``wandb`` (``wandb.Table``) and ``trackio`` (``trackio.Table``), as TRL logs its completion tables.
Only the main process writes, from its own rollout. ``trl-envs show <output_dir>`` renders the traces.
"""

from __future__ import annotations

import os

from transformers import TrainerCallback

from ..rollout.traces import TRACES_DIR, table_rows, trace_records, write_traces


class RolloutTraceCallback(TrainerCallback):
    """Writes and logs rollout traces when the Trainer logs: a sample of the latest training rollout ``rollouts``
    announced (:meth:`~trl_envs.trainers.rollouts.EnvRollouts.add_listener`), once per rollout.

    Args:
        rollouts: the trainer's :class:`~trl_envs.trainers.rollouts.EnvRollouts`.
        tokenizer: the tokenizer of the envs' renderer (decodes the episodes' tokens).
        per_tag: episodes per env tag each time.
    """

    def __init__(self, rollouts, tokenizer, per_tag: int):
        self.tokenizer, self.per_tag = tokenizer, per_tag
        self.latest = None  # the latest training rollout, until written
        rollouts.add_listener(self._keep)

    def _keep(self, rollout) -> None:
        self.latest = rollout

    def on_log(self, args, state, control, logs=None, **kwargs):
        rollout = self.latest  # one rollout serves several steps with steps_per_generation: written once
        if not state.is_world_process_zero or rollout is None or "loss" not in (logs or {}):
            return
        self.latest = None
        records = trace_records(
            rollout.groups,
            self.tokenizer,
            step=state.global_step,
            per_tag=self.per_tag,
            training_rows=getattr(args, "training_rows", "auto"),
        )
        if not records:
            return
        write_traces(os.path.join(args.output_dir, TRACES_DIR), records, state.global_step)
        log_table(args.report_to or [], records, state.global_step)


def log_table(report_to, records, step: int) -> None:
    """Log ``records`` as the table ``rollouts`` to the trackers among ``report_to`` that take tables (an active
    ``wandb`` run; ``trackio``)."""
    columns, rows = table_rows(records)
    if "wandb" in report_to:
        import wandb

        if wandb.run is not None:
            wandb.log({"rollouts": wandb.Table(columns=columns, data=rows)}, step=step)
    if "trackio" in report_to:
        import pandas as pd
        import trackio

        trackio.log({"rollouts": trackio.Table(dataframe=pd.DataFrame(rows, columns=columns))}, step=step)
