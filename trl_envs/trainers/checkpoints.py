"""Checkpoints you can trust, and one run per output folder.

* A checkpoint counts as complete only once its completion marker (:data:`MARKER`, written by
  :class:`CheckpointMarker` after the Trainer has written everything else) is in it. :func:`last_complete_checkpoint`
  (what ``resume_from_checkpoint=True`` / ``"last"`` means) skips folders without one and says which.
* :func:`verify_checkpoint` reads what a resume needs (``trainer_state.json``, the ``*.safetensors`` headers) and names
  the file that is bad.
* The marker holds the run's settings that give a step its meaning (:func:`run_settings`: group size, batch geometry,
  processes, model, env); :func:`check_resume_settings` refuses to resume with other ones and lists the differences,
  unless ``resume_allow_changes`` is set.
* A full disk while a checkpoint is written (:func:`name_disk_full`) stops the run with one line naming the checkpoint,
  the disk and its free space, and the newest complete checkpoint to resume from; the half-written folder has no
  marker, so ``resume_from_checkpoint last`` skips it and says so.
* :func:`hold_output_dir` locks ``output_dir`` (``filelock``) for the length of a run: a second run on the same folder
  is refused at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from ..errors.disk_full import describe_disk, is_disk_full
from ..errors.messages import shorten
from ..errors.types import RunFailed, UsageError

MARKER = "trl_envs_checkpoint.json"
"""The completion marker of a checkpoint folder: written last, holding :func:`run_settings`."""
LOCK_FILE = ".trl_envs.lock"
GEOMETRY = (
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "generation_batch_size",
    "world_size",
)
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class CheckpointError(UsageError):
    """A checkpoint that cannot be resumed from: incomplete, corrupted, or of a run with other settings."""


@dataclass
class ResumeArguments:
    """Resume and overwrite options of the env trainers' configs."""

    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Train into an output_dir that holds another run's model (another algorithm, env or model), "
            "replacing that run: its traces and checkpoint folders are removed, its model files overwritten. "
            "Refused by default (the training scripts)."
        },
    )

    resume_allow_changes: bool = field(
        default=False,
        metadata={
            "help": "Resume from a checkpoint even though the group size, batch geometry, number of processes, model "
            "or env differ from the run that wrote it (refused by default, with the differences listed)."
        },
    )


def run_settings(args: Any, model: Any = None, env: Any = None) -> dict[str, Any]:
    """The settings that give a training step its meaning: batch geometry and processes (from ``args``), the model
    (id or path) and the env (the training dataset's and its first group builder's class names)."""
    settings: dict[str, Any] = {name: getattr(args, name) for name in GEOMETRY if hasattr(args, name)}
    if model is not None:
        settings["model"] = (
            model
            if isinstance(model, str)
            else (getattr(getattr(model, "config", None), "name_or_path", None) or type(model).__name__)
        )
    if env is not None:
        settings["env"] = env
    return settings


class DiskFullError(RunFailed):
    """The disk filled up while a checkpoint was written (the message names the checkpoint, the disk, its free space
    and the checkpoint to resume from)."""


class CheckpointMarker(TrainerCallback):
    """Writes :data:`MARKER` into each checkpoint once the Trainer has saved it (main process; atomic rename).

    Attributes:
        writing: the checkpoint folder the Trainer is writing now (from the step that decided to save until it is
            marked), else ``None``.
        deferred: while true, a checkpoint the Trainer saves is left unmarked: whoever adds files to it afterwards
            marks it with :meth:`mark` (env-driven DPO's round checkpoints).
    """

    def __init__(self, settings: dict[str, Any]):
        self.settings = settings
        self.writing: str | None = None
        self.deferred = False

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save:  # the Trainer saves right after the step-end callbacks
            self.writing = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")

    def on_save(self, args, state, control, **kwargs):
        if self.deferred:
            return
        self.writing = None
        if state.is_world_process_zero:
            self.mark(os.path.join(args.output_dir, f"checkpoint-{state.global_step}"), state.global_step)

    def mark(self, folder: str, global_step: int) -> None:
        """Write ``folder``'s marker (call it on the main process, once everything else is in the folder)."""
        self.writing = None
        if os.path.isdir(folder):
            write_marker(folder, {"global_step": global_step, "settings": self.settings})


def write_marker(folder: str, content: dict[str, Any]) -> None:
    """Write ``content`` as ``folder``'s completion marker, atomically (temporary file, fsync, rename)."""
    tmp = os.path.join(folder, MARKER + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(content, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(folder, MARKER))


@contextlib.contextmanager
def name_disk_full(output_dir: str | None, marker: CheckpointMarker | None) -> Iterator[None]:
    """Turn a full disk met while ``marker.writing`` (a checkpoint) is written into a :class:`DiskFullError` naming
    the checkpoint, the disk with its free space, and the newest complete checkpoint left to resume from."""
    try:
        yield
    except Exception as error:
        writing = marker.writing if marker is not None else None
        if writing is None or not _disk_full_while_writing(error, writing):
            raise
        folder = os.path.dirname(writing)
        previous = last_complete_checkpoint(folder, report=lambda _: None) if os.path.isdir(folder) else None
        resume = (
            f"{previous} is complete: free some space (or lower save_total_limit) and resume with "
            "resume_from_checkpoint last (it skips the incomplete one)"
            if previous
            else "no complete checkpoint is left: free some space and run again"
        )
        raise DiskFullError(
            f"no space left on device while writing {writing}: {describe_disk(folder)}. {resume}."
        ) from error


def _disk_full_while_writing(error: BaseException, writing: str) -> bool:
    """A full disk, said in so many words -- or torch's writer failing (its message never says why) on a disk with
    almost nothing left."""
    if is_disk_full(error):
        return True
    if not isinstance(error, (RuntimeError, OSError)):
        return False
    try:
        free = shutil.disk_usage(os.path.dirname(writing)).free
    except OSError:
        return False
    return free < NEARLY_FULL_BYTES


NEARLY_FULL_BYTES = 64 * 2**20
"""A checkpoint write that fails with less than this free on its disk is reported as a full disk."""


def last_complete_checkpoint(output_dir: str, report=print) -> str | None:
    """The newest ``checkpoint-N`` folder of ``output_dir`` that has its completion marker; each newer folder without
    one is skipped and ``report``-ed by name."""
    found = []
    for name in os.listdir(output_dir):
        m = _CHECKPOINT.match(name)
        if m and os.path.isdir(os.path.join(output_dir, name)):
            found.append((int(m.group(1)), name))
    for _, name in sorted(found, reverse=True):
        path = os.path.join(output_dir, name)
        if os.path.isfile(os.path.join(path, MARKER)):
            return path
        report(f"[trl_envs] skipping {path}: incomplete (no {MARKER}; its writing was interrupted)")
    return None


def verify_checkpoint(path: str) -> dict[str, Any] | None:
    """Check that ``path`` can be resumed from and return its marker (``None`` for a folder written without one).

    Raises:
        CheckpointError: naming the file that is missing or unreadable.
    """
    state = os.path.join(path, "trainer_state.json")
    _read_json(state, f"checkpoint {path}")
    for name in sorted(os.listdir(path)):
        if name.endswith(".safetensors"):
            _check_safetensors(os.path.join(path, name), path)
    marker = os.path.join(path, MARKER)
    return _read_json(marker, f"checkpoint {path}") if os.path.exists(marker) else None


def _read_json(file: str, what: str) -> Any:
    try:
        with open(file, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise CheckpointError(f"{what} is incomplete: {file} is missing") from None
    except (OSError, ValueError) as e:
        raise CheckpointError(
            f"{what} is corrupted: {file} cannot be read ({type(e).__name__}: {shorten(str(e))})"
        ) from None


def _check_safetensors(file: str, checkpoint: str) -> None:
    """The header parses and the data is as long as the header says."""
    try:
        with open(file, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            size = os.fstat(f.fileno()).st_size
            if n <= 0 or 8 + n > size:
                raise ValueError(f"header of {n} bytes in a file of {size} bytes")
            header = json.loads(f.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        if 8 + n + end > size:
            raise ValueError(f"the tensors need {8 + n + end} bytes, the file has {size} (truncated)")
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise CheckpointError(
            f"checkpoint {checkpoint} is corrupted: {file} is not a valid safetensors file ({shorten(str(e))})"
        ) from None


def check_resume_settings(
    path: str, marker: dict[str, Any] | None, settings: dict[str, Any], allow_changes: bool = False, report=print
) -> None:
    """Refuse to resume from ``path`` when its run's settings differ from ``settings`` (listing each difference),
    unless ``allow_changes`` (then the differences are only reported)."""
    saved = (marker or {}).get("settings") or {}
    diffs = [
        f"{k}: {saved[k]!r} in the checkpoint, {settings[k]!r} now"
        for k in sorted(set(saved) & set(settings))
        if saved[k] != settings[k]
    ]
    if not diffs:
        return
    listed = "; ".join(diffs)
    if allow_changes:
        report(f"[trl_envs] resuming from {path} with changed settings (resume_allow_changes): {listed}")
        return
    raise CheckpointError(
        f"cannot resume from {path}: the run's settings changed ({listed}). A step would not mean "
        "what it meant; resume with the checkpoint's settings, or pass --resume_allow_changes true"
    )


_held: dict[str, list] = {}


def is_main_launch_process() -> bool:
    """Whether this is the main process of a launch (``RANK`` unset or 0), known before any model or accelerator."""
    return int(os.environ.get("RANK", "0") or 0) == 0


@contextlib.contextmanager
def hold_output_dir(output_dir: str | os.PathLike[str] | None) -> Iterator[None]:
    """Hold ``output_dir``'s lock (:data:`LOCK_FILE`) for the block; another process holding it is refused at once
    with :class:`UsageError`. Re-entrant within a process; only the main process (``RANK`` 0) locks."""
    if output_dir is None or not is_main_launch_process():
        yield
        return
    from filelock import FileLock, Timeout

    key = os.path.realpath(output_dir)
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    os.makedirs(key, exist_ok=True)
    lock = FileLock(os.path.join(key, LOCK_FILE))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise UsageError(
            f"output_dir {shorten(str(output_dir))} is in use by another run (it holds "
            f"{os.path.join(key, LOCK_FILE)}); give another --output_dir or wait for that run to "
            "end"
        ) from None
    _held[key] = [lock, 1]
    try:
        yield
    finally:
        del _held[key]
        lock.release()


__all__ = [
    "CheckpointError",
    "CheckpointMarker",
    "MARKER",
    "ResumeArguments",
    "check_resume_settings",
    "hold_output_dir",
    "is_main_launch_process",
    "last_complete_checkpoint",
    "run_settings",
    "verify_checkpoint",
]
