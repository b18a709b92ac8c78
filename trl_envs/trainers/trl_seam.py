"""The one module that relies on TRL internals (names TRL does not export, private attributes of its trainers).

Every use names the TRL 1.16 behaviour it relies on, so an upgrade of TRL is checked here and nowhere else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def grpo_reference_model(reference) -> Iterator[None]:
    """While active, ``GRPOTrainer.__init__`` takes ``reference`` as its reference model instead of loading one.

    TRL 1.16 behaviour relied on: with ``beta != 0`` and a policy that is not a PEFT model, ``GRPOTrainer.__init__``
    builds the reference as ``trl.trainer.grpo_trainer.create_model_from_path(get_config_model_id(model.config),
    ...)``, i.e. reloads the weights saved at ``model.config._name_or_path`` (empty for a model built in memory, stale
    for one changed since it was loaded); it then disables dropout, adds its fused LM head and prepares that model as
    it would a loaded one. With a policy given as an instance that is the constructor's only call of
    ``create_model_from_path``; a second call means TRL changed, and fails loudly rather than returning the reference
    for something else.
    """
    from trl.trainer import grpo_trainer

    original = grpo_trainer.create_model_from_path
    calls: list[str] = []

    def reference_instead(model_id, **kwargs):
        calls.append(model_id)
        if len(calls) > 1:
            raise RuntimeError("trl_envs.trainers.trl_seam.grpo_reference_model: GRPOTrainer called "
                               f"create_model_from_path more than once ({calls}); this TRL version builds models "
                               "differently from TRL 1.16, update trl_seam.py")
        return reference

    grpo_trainer.create_model_from_path = reference_instead
    try:
        yield
    finally:
        grpo_trainer.create_model_from_path = original


def dpo_tokens_seen(trainer) -> int:
    """The running token count behind the ``num_tokens`` metric of a ``DPOTrainer``.

    TRL 1.16 behaviour relied on: ``DPOTrainer`` keeps it in ``self._total_train_tokens`` (set to 0 in ``__init__``,
    increased by every training batch's attention-mask sum, logged as ``num_tokens``); it is not part of the
    ``TrainerState`` a checkpoint holds, so a resumed run restores it with :func:`set_dpo_tokens_seen`.
    """
    return int(trainer._total_train_tokens)


def set_dpo_tokens_seen(trainer, value: int) -> None:
    """Restore the count read by :func:`dpo_tokens_seen`."""
    trainer._total_train_tokens = int(value)
