"""One run per output folder: a training run records what it is, and a run of something else is refused there.

A run writes :data:`RUN_RECORD` (``trl_envs_run.json``) into its ``output_dir`` when it starts: the algorithm, the
env (or dataset) and the model (:class:`RunIdentity`). The next run into that folder is compared with it
(:func:`claim_output_dir`):

* another algorithm, env or model, and the folder holds its model (weights, an adapter or a ``checkpoint-*``
  folder): refused with one line naming both runs, unless ``--overwrite_output_dir true``
  (the old run's traces and ``checkpoint-*`` folders are removed; its model files are overwritten when this run
  saves) or ``--resume_from_checkpoint`` (whose own check refuses a checkpoint of other settings);
* the same run again: allowed; it starts afresh.

Either way the folder's rollout traces are this run's only: a fresh run removes the old ``rollouts/step_*.jsonl``, a
resumed one those after the checkpoint's step (they are written again). A folder without the record is recognised by
the ``training_config.json`` the scripts write at the end; one that holds a model but neither file is refused too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass
from typing import Any

from ..errors.messages import shorten
from ..errors.types import UsageError
from ..rollout.traces import TRACES_DIR

RUN_RECORD = "trl_envs_run.json"
"""The file in ``output_dir`` that says which run wrote it."""
TRAINING_CONFIG = "training_config.json"
MODEL_FILES = ("config.json", "adapter_config.json", "model.safetensors", "adapter_model.safetensors")
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_TRACE = re.compile(r"^step_(\d+)\.jsonl$")


@dataclass(frozen=True)
class RunIdentity:
    """What a run is: ``algorithm`` (``grpo`` / ``dpo``), ``env`` (an env name, ``dataset <path>`` or
    ``preferences <data>``) and ``model`` (as given: a Hub id, a path, or the offline tiny model's name)."""

    algorithm: str
    env: str
    model: str

    def describe(self) -> str:
        from ..model_names import MODEL_NAMES

        last = os.path.basename(os.path.normpath(self.model))
        return f"{self.algorithm} on {self.env} with {last if last in MODEL_NAMES else self.model}"

    def same_run(self, other: RunIdentity) -> bool:
        return (self.algorithm, self.env, _model_key(self.model)) == (
            other.algorithm,
            other.env,
            _model_key(other.model),
        )


def _model_key(model: str) -> str:
    """One name per model: a tiny model by its name wherever it was built, a local folder by its real path."""
    from ..model_names import MODEL_NAMES

    last = os.path.basename(os.path.normpath(model))
    if last in MODEL_NAMES:
        return last
    path = os.path.expanduser(model)
    return os.path.realpath(path) if os.path.isdir(path) else model


def run_identity(algorithm: str, script_args: Any, model_args: Any) -> RunIdentity:
    """The :class:`RunIdentity` of a training script's run from its parsed arguments."""
    model = getattr(model_args, "model_name_or_path", None) or getattr(script_args, "tiny_model", None) or "?"
    if getattr(script_args, "env_dataset", None):
        env = f"dataset {script_args.env_dataset}"
    elif getattr(script_args, "env_name", None):
        env = script_args.env_name
    elif getattr(script_args, "dataset_name", None) or getattr(script_args, "data_files", None):
        env = f"preferences {getattr(script_args, 'dataset_name', None) or ' '.join(script_args.data_files)}"
    elif algorithm == "grpo":
        env = "arithmetic"  # the GRPO script's default env
    else:
        env = "preferences"  # offline DPO on the built-in preference data
    return RunIdentity(algorithm, env, str(model))


def recorded_identity(output_dir: str) -> RunIdentity | None:
    """The run recorded in ``output_dir`` (:data:`RUN_RECORD`, else the scripts' ``training_config.json``), or
    ``None``."""
    record = _read(os.path.join(output_dir, RUN_RECORD))
    if record and {"algorithm", "env", "model"} <= set(record):
        return RunIdentity(str(record["algorithm"]), str(record["env"]), str(record["model"]))
    config = _read(os.path.join(output_dir, TRAINING_CONFIG))
    if config and "algorithm" in config:
        script = config.get("script_args") or {}
        model = config.get("base_model") or "?"
        return run_identity(str(config["algorithm"]), _Namespace(script), _Namespace({"model_name_or_path": model}))
    return None


class _Namespace:
    def __init__(self, values: dict[str, Any]):
        self.__dict__.update(values)


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def holds_a_model(output_dir: str) -> str | None:
    """The first model file or checkpoint folder in ``output_dir`` (its name), or ``None``."""
    for name in MODEL_FILES:
        if os.path.isfile(os.path.join(output_dir, name)):
            return name
    for name in sorted(os.listdir(output_dir)):
        if _CHECKPOINT.match(name) and os.path.isdir(os.path.join(output_dir, name)):
            return name
    return None


def claim_output_dir(
    output_dir: str,
    identity: RunIdentity,
    *,
    overwrite: bool = False,
    resume_from: str | None = None,
    report=print,
) -> None:
    """Make ``output_dir`` this run's (see the module docstring): refuse it when it holds another run, clear the
    traces this run would mix with, and record ``identity``. Main process only; call it holding the folder's lock.

    Raises:
        UsageError: ``output_dir`` holds another run's model (both runs named) and neither ``overwrite`` nor
            ``resume_from`` is given.
    """
    os.makedirs(output_dir, exist_ok=True)
    previous = recorded_identity(output_dir)
    if resume_from is None:
        model = holds_a_model(output_dir)  # a run that stopped before saving anything leaves nothing to protect
        other = bool(model) and previous is not None and not previous.same_run(identity)
        unknown = previous is None and model
        if (other or unknown) and not overwrite:
            what = f"another run's model ({previous.describe()})" if other else f"a model ({unknown}) of another run"
            raise UsageError(
                f"output_dir {shorten(output_dir)} holds {what}; this run is {identity.describe()}: give another "
                "--output_dir (by default it names the env and the model), --overwrite_output_dir true to replace "
                "that run, or --resume_from_checkpoint to continue it"
            )
        if other or unknown:
            removed = _remove_checkpoints(output_dir)
            report(
                f"[trl_envs] --overwrite_output_dir: replacing the run in {output_dir} "
                f"({previous.describe() if previous else 'unrecorded'}; removed {removed} checkpoint folder(s) and "
                "its traces)"
            )
    _remove_traces(output_dir, after_step=_checkpoint_step(resume_from) if resume_from else None)
    tmp = os.path.join(output_dir, RUN_RECORD + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(asdict(identity), f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(output_dir, RUN_RECORD))


def _checkpoint_step(checkpoint: str) -> int:
    m = _CHECKPOINT.match(os.path.basename(os.path.normpath(checkpoint)))
    if m:
        return int(m.group(1))
    state = _read(os.path.join(checkpoint, "trainer_state.json")) or {}
    return int(state.get("global_step", 0))


def _remove_traces(output_dir: str, after_step: int | None) -> None:
    """Remove ``rollouts/step_*.jsonl`` (all, or those after ``after_step``) and the HTML page built from them."""
    folder = os.path.join(output_dir, TRACES_DIR)
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        m = _TRACE.match(name)
        if (m and (after_step is None or int(m.group(1)) > after_step)) or name == "index.html":
            os.remove(os.path.join(folder, name))


def _remove_checkpoints(output_dir: str) -> int:
    names = [n for n in os.listdir(output_dir) if _CHECKPOINT.match(n) and os.path.isdir(os.path.join(output_dir, n))]
    for name in names:
        shutil.rmtree(os.path.join(output_dir, name))
    return len(names)


__all__ = ["RUN_RECORD", "RunIdentity", "claim_output_dir", "recorded_identity", "run_identity"]
