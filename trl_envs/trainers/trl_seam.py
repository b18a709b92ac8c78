"""The seam to TRL: the one module of ``trl_envs`` that uses TRL's (and ``transformers``') private names and TRL's
unexported names.

TRL's private attributes, hook methods and internal classes may change in any release. Everything ``trl_envs`` relies
on that is not public API goes through the small functions and aliases below, each naming the behaviour it relies on,
and is listed in :data:`TRL_PRIVATE_NAMES`. :func:`check_trl_compatibility` verifies that the installed TRL and
transformers still have each entry (the env trainers call it when they are built) and names this module and the
missing name when one is gone.

The contract, enforced by ``tests/test_trl_seam.py`` (which finds private names by scanning the code, not by reading
this table): no other module under ``trl_envs/`` reads, writes, calls or overrides a private name of TRL,
transformers or accelerate, or imports an unexported TRL name, except a trainer hook listed here with
``overridden_in`` naming that module (its ``def`` and the ``super()`` call inside it); every such name this module
uses is listed; every entry is used. Upgrading TRL: docs/DESIGN.md, "Upgrading TRL".
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import transformers
import trl
from accelerate.utils import gather_object

SEAM_MODULE = "trl_envs/trainers/trl_seam.py"


class TRLCompatibilityError(RuntimeError):
    """The installed TRL or transformers lacks a name ``trl_envs`` relies on (see :data:`TRL_PRIVATE_NAMES`)."""


CHECKS = ("attr", "source")
"""The ways :func:`check_trl_compatibility` verifies an entry (:attr:`PrivateName.check`)."""


@dataclass(frozen=True)
class PrivateName:
    """One private or unexported name of TRL / transformers (or one of TRL's message texts, or an attribute a TRL
    trainer sets on itself without an underscore that is not documented API) that ``trl_envs`` relies on.

    Attributes:
        name: the name as code writes it (an attribute, method, class or function name), or the text of a message.
        owner: the dotted path of the class or module that has it.
        relied_on: the behaviour ``trl_envs`` relies on.
        check: how :func:`check_trl_compatibility` verifies it: ``"attr"`` (the owner has the attribute ``name``) or
            ``"source"`` (the source file of the owner contains :attr:`source`: attributes set in ``__init__``,
            conditions, messages).
        overridden_in: for a trainer hook a trainer of ``trl_envs`` overrides, the module (path under the repository
            root) that defines the method; that module may define it and call ``super().name`` inside it.
        source_text: with ``check="source"``, the text to find; default ``self.<name>`` for an identifier, else
            ``name`` itself (a message).
        trainer: the env trainer that needs it (``"grpo"`` / ``"dpo"``), so that a version lacking a name only one
            trainer uses does not stop the other; ``None``: both.
    """

    name: str
    owner: str
    relied_on: str
    check: str = field(default="attr", kw_only=True)
    overridden_in: str | None = field(default=None, kw_only=True)
    source_text: str | None = field(default=None, kw_only=True)
    trainer: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if self.check not in CHECKS:
            raise ValueError(
                f"{SEAM_MODULE}: entry {self.name!r} of {self.owner}: check must be one of {list(CHECKS)}, got "
                f"{self.check!r}"
            )
        if self.source_text is not None and self.check != "source":
            raise ValueError(f"{SEAM_MODULE}: entry {self.name!r} of {self.owner}: source_text needs check='source'")

    @property
    def source(self) -> str:
        """The text a ``"source"`` check looks for in the owner's source file."""
        if self.source_text is not None:
            return self.source_text
        return f"self.{self.name}" if self.name.isidentifier() else self.name


TRL_PRIVATE_NAMES: tuple[PrivateName, ...] = (
    PrivateName(
        "_generate_and_score_completions",
        "trl.GRPOTrainer",
        "the per-generation-round hook: gets this rank's dataset rows, returns the scored batch (ids, masks, "
        "advantages); EnvGRPOTrainer rolls out the rows' env groups, then calls it with one row per planned row, "
        "whose prompt carries that row for rollout_func",
        overridden_in="trl_envs/trainers/grpo.py",
        trainer="grpo",
    ),
    PrivateName(
        "_metrics",
        "trl.GRPOTrainer",
        "mode ('train'/'eval') -> metric name -> list of values whose mean over the logging window log() "
        "logs; record_mean_metrics appends the env metrics there after one cross-rank gather",
        check="source",
        trainer="grpo",
    ),
    PrivateName(
        "_logs",
        "trl.GRPOTrainer",
        "the record of the latest scored rows ('prompt', 'completion', 'rewards' name -> values, 'advantages'), "
        "gathered over processes, in deques of generation_batch_size",
        check="source",
        trainer="grpo",
    ),
    PrivateName(
        "_init_training_state",
        "transformers.Trainer",
        "(max_steps, ...) makes the fresh TrainerState of one train() call, before the loop reads its global "
        "step; continued_training_state wraps it so env-driven DPO rounds keep counting steps, logs and FLOPs "
        "(no public door: train() makes a fresh TrainerState unless resume_from_checkpoint, which also reloads "
        "weights, optimizer and scheduler and skips global_step // steps_per_epoch epochs)",
        trainer="dpo",
    ),
    PrivateName(
        "_finalize_training",
        "transformers.Trainer",
        "(trial, num_train_samples, start_time) computes the speed metrics of one train() call from "
        "state.max_steps; continued_training_state scales them to the call's own steps",
        trainer="dpo",
    ),
    PrivateName(
        "create_model_from_path",
        "trl.trainer.grpo_trainer",
        "GRPOTrainer.__init__ builds the reference model (beta != 0, no PEFT) with this function of its module, "
        "called once; grpo_reference_model replaces it to hand in a frozen copy of the policy",
        trainer="grpo",
    ),
    PrivateName(
        "_get_per_token_logps_and_entropies",
        "trl.GRPOTrainer",
        "(model, input_ids, attention_mask, logits_to_keep, ...) -> (per-token logprobs, entropies, aux loss): "
        "GRPOTrainer._compute_loss calls it first, for the policy, and reads inputs['advantages'] only afterwards; "
        "on_loss_policy_logprobs hands those logprobs to the async correction, which weights the advantages "
        "without a second forward pass (no public door: the loss's logprobs are not exposed)",
        trainer="grpo",
    ),
    PrivateName(
        "eos_token_ids",
        "trl.GRPOTrainer",
        "the token ids that end a completion: generation stops on them and scoring counts a completion whose last "
        "token is not one of them (or pad) as truncated; EnvGRPOTrainer adds the chat template's turn stops",
        check="source",
        trainer="grpo",
    ),
    PrivateName(
        "vllm_generation",
        "trl.GRPOTrainer",
        "the VLLMGeneration GRPOTrainer.__init__ builds with use_vllm (the vLLM engine or server client and its "
        "weight sync); VLLMSampler generates with it",
        check="source",
        trainer="grpo",
    ),
)


def _resolve(dotted: str):
    module_name, _, attr = dotted.rpartition(".")
    with contextlib.suppress(ImportError):
        return importlib.import_module(dotted)
    return getattr(importlib.import_module(module_name), attr)


@functools.cache
def _source_file_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _source_of(owner) -> str:
    """The source of the file defining ``owner`` (read once; ``inspect.getsource`` of a class re-parses its module)."""
    return _source_file_text(inspect.getsourcefile(owner))


def check_trl_compatibility(names: Iterable[PrivateName] = TRL_PRIVATE_NAMES, trainer: str | None = None) -> None:
    """Raise :class:`TRLCompatibilityError` naming this module and the first missing entry of ``names`` (default
    :data:`TRL_PRIVATE_NAMES`; with ``trainer``, only the entries that trainer needs) if the installed TRL or
    transformers lacks it."""
    names = [e for e in names if trainer is None or e.trainer in (None, trainer)]
    for entry in names:
        try:
            owner = _resolve(entry.owner)
            found = (entry.source in _source_of(owner)) if entry.check == "source" else hasattr(owner, entry.name)
        except (ImportError, AttributeError, OSError, TypeError):
            found = False
        if not found:
            versions = f"trl {trl.__version__} / transformers {transformers.__version__}"
            raise TRLCompatibilityError(
                f"{SEAM_MODULE} relies on {entry.name!r} of {entry.owner} ({entry.relied_on}), which the installed "
                f"{versions} does not have. Update {SEAM_MODULE} for these versions (docs/DESIGN.md, "
                "'Upgrading TRL') or install the versions pyproject.toml declares (docs/versions.md)."
            )


# -- attributes of a built trainer ------------------------------------------------------------------------------------


def logged_metrics(trainer, mode: str = "train") -> dict[str, list[float]]:
    """The metrics the trainer gathered since its last ``log()`` (name -> values). Relies on: TRL trainers'
    ``_metrics[mode]``, filled by ``compute_loss`` / scoring and cleared by ``log()``."""
    return trainer._metrics[mode]


def logged_completions(trainer) -> dict:
    """TRL's record of the latest scored rows, gathered over processes. Relies on: GRPOTrainer's ``_logs``
    (``prompt``, ``completion``, ``rewards`` reward name -> values, ``advantages``), appended by
    ``_generate_and_score_completions``; returned as lists, oldest first."""
    logs = trainer._logs
    return {
        "prompt": list(logs["prompt"]),
        "completion": list(logs["completion"]),
        "rewards": {name: list(values) for name, values in logs["rewards"].items()},
        "advantages": list(logs["advantages"]),
    }


def stop_token_ids(trainer) -> list[int]:
    """The token ids that end a completion. Relies on: ``GRPOTrainer.__init__`` sets ``eos_token_ids`` (the
    tokenizer's EOS, or the generation config's), which generation stops on and scoring reads to tell truncated
    completions."""
    return list(trainer.eos_token_ids)


def set_stop_token_ids(trainer, token_ids: Sequence[int]) -> None:
    """Make ``token_ids`` the tokens that end a completion (see :func:`stop_token_ids`)."""
    trainer.eos_token_ids = list(token_ids)


def vllm_generation(trainer):
    """TRL's vLLM generation of a ``GRPOTrainer`` built with ``use_vllm``. Relies on: ``GRPOTrainer.__init__`` sets
    ``vllm_generation`` to its ``VLLMGeneration`` (engine or server client, weight sync)."""
    return trainer.vllm_generation


def score_generation_batch(trainer, inputs: list[dict]) -> dict:
    """Generate and score one generation batch of dataset rows with any ``GRPOTrainer`` (TRL's own or ours), as a
    training step does: the batch it trains on (ids, masks, advantages). Relies on:
    ``GRPOTrainer._generate_and_score_completions(inputs)``."""
    return trainer._generate_and_score_completions(inputs)


# -- class-level settings and construction -----------------------------------------------------------------------------


# -- model construction and resume ------------------------------------------------------------------------------------


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
            raise RuntimeError(
                "trl_envs.trainers.trl_seam.grpo_reference_model: GRPOTrainer called "
                f"create_model_from_path more than once ({calls}); this TRL version builds models "
                "differently from TRL 1.16, update trl_seam.py"
            )
        return reference

    grpo_trainer.create_model_from_path = reference_instead
    try:
        yield
    finally:
        grpo_trainer.create_model_from_path = original


@contextlib.contextmanager
def continued_training_state(trainer) -> Iterator[None]:
    """While active, ``trainer.train()`` continues the trainer's ``TrainerState`` instead of starting a fresh one:
    ``global_step``, ``log_history``, ``total_flos`` and ``num_input_tokens_seen`` go on from where they are (so
    loggers see one run), the call trains its own ``max_steps`` / epochs (``state.max_steps`` becomes the current step
    plus that), and its speed metrics count only its own steps. The optimizer, learning-rate schedule and dataloader
    are the ``Trainer``'s as in any ``train()`` call.

    transformers 5.24 behaviour relied on: ``Trainer._inner_training_loop`` makes the state in
    ``_init_training_state(max_steps, ...)`` and only afterwards reads ``state.global_step`` (first step, last logged
    step, steps of this call); the stop test compares ``global_step`` with ``state.max_steps``;
    ``_finalize_training`` scales the samples of the speed metrics by ``steps of this call / state.max_steps``.
    """
    previous = trainer.state
    start = previous.global_step
    init_state, finalize = trainer._init_training_state, trainer._finalize_training

    def init_continued(max_steps, *args, **kwargs):
        result = init_state(max_steps, *args, **kwargs)
        state = trainer.state
        state.global_step = start
        state.max_steps = start + max_steps
        state.log_history = previous.log_history
        state.total_flos = previous.total_flos
        state.num_input_tokens_seen = previous.num_input_tokens_seen
        return result

    def finalize_own_steps(*args, **kwargs):
        total = trainer.state.max_steps
        trainer.state.max_steps = total - start
        try:
            return finalize(*args, **kwargs)
        finally:
            trainer.state.max_steps = total

    trainer._init_training_state, trainer._finalize_training = init_continued, finalize_own_steps
    try:
        yield
    finally:
        del trainer._init_training_state, trainer._finalize_training  # the class's methods again


@contextlib.contextmanager
def on_loss_policy_logprobs(trainer, callback) -> Iterator[None]:
    """While active, ``callback(logps)`` gets the policy's per-token logprobs of the first forward pass of TRL's loss
    (``_compute_loss``), before the loss reads the batch's advantages. Relies on: ``GRPOTrainer._compute_loss`` calls
    ``self._get_per_token_logps_and_entropies`` for the policy first, then reads ``inputs['advantages']``."""
    original = trainer._get_per_token_logps_and_entropies
    called = []

    def first_forward(*args, **kwargs):
        logps, entropies, aux = original(*args, **kwargs)
        if not called:
            called.append(True)
            callback(logps)
        return logps, entropies, aux

    trainer._get_per_token_logps_and_entropies = first_forward  # an instance attribute over the method
    try:
        yield
    finally:
        del trainer._get_per_token_logps_and_entropies


def record_mean_metrics(trainer, mode: str, metrics: Mapping[str, Sequence[float]]) -> None:
    """Append, for each metric, the mean of its samples over all processes to the values TRL logs, with ONE
    gather for all metrics (TRL's own metric queue gathers once per metric name).

    TRL 1.16 behaviour relied on: ``GRPOTrainer._metrics[mode][name]`` is a list whose mean over the logging window
    ``GRPOTrainer.log`` logs as ``name``. Every process must call it at the same point (it is a collective when
    there are several); names may differ between processes (a name missing on one counts no samples there).
    """
    accelerator = trainer.accelerator
    names = sorted(metrics)
    if accelerator.num_processes > 1:
        names = sorted({n for rank_names in gather_object([names]) for n in rank_names})
    if not names:
        return
    local = torch.tensor(
        [[float(sum(metrics.get(n, ()))), float(len(metrics.get(n, ())))] for n in names], dtype=torch.float64
    )
    if accelerator.num_processes > 1:
        local = accelerator.gather(local.to(accelerator.device)).view(-1, len(names), 2).sum(0).cpu()
    for name, (total, count) in zip(names, local.tolist()):
        if count:
            trainer._metrics[mode][name].append(total / count)


__all__ = [
    "PrivateName",
    "SEAM_MODULE",
    "TRLCompatibilityError",
    "TRL_PRIVATE_NAMES",
    "CHECKS",
    "check_trl_compatibility",
    "continued_training_state",
    "grpo_reference_model",
    "logged_completions",
    "logged_metrics",
    "on_loss_policy_logprobs",
    "record_mean_metrics",
    "score_generation_batch",
    "set_stop_token_ids",
    "stop_token_ids",
    "vllm_generation",
]
