"""A full disk: telling it from other errors, and the line that names the file and the disk's free space.

The checkpoint writer (:mod:`trl_envs.trainers.checkpoints`) raises its own :class:`~trl_envs.errors.types.RunFailed`
with these; :func:`trl_envs.cli.errors.run_command` turns a full disk met anywhere else into one line and exit 1.
"""

from __future__ import annotations

import errno
import os
import shutil

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_TEXTS = ("No space left on device", "os error 28", "Disk quota exceeded")


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error`` (or an error it was raised from) says the disk is full: ``ENOSPC`` / ``EDQUOT``, or the text of
    one (safetensors' writer reports ``os error 28`` in its message)."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS:
            return True
        if any(text in str(error) for text in DISK_FULL_TEXTS):
            return True
        error = error.__cause__ or error.__context__
    return False


def describe_disk(path: str | os.PathLike[str]) -> str:
    """``"the disk holding <path> has <free> free of <total>"`` (the nearest existing folder of ``path``)."""
    folder = os.path.abspath(os.fspath(path))
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    try:
        usage = shutil.disk_usage(folder)
    except OSError:
        return f"the disk holding {path} (its free space could not be read)"
    return f"the disk holding {folder} has {_size(usage.free)} free of {_size(usage.total)}"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # pragma: no cover


def disk_full_message(error: BaseException) -> str | None:
    """One line for a full disk met outside a checkpoint (the final model save, a log file): the file and the free
    space of its disk; ``None`` when ``error`` is not a full disk."""
    if not is_disk_full(error):
        return None
    filename = getattr(error, "filename", None)
    where = f"while writing {filename}" if filename else "while writing"
    disk = describe_disk(filename) if filename else "check the free space of the output folder's disk"
    return f"no space left on device {where}: {disk}. Free some space and run again."


__all__ = ["describe_disk", "disk_full_message", "is_disk_full"]
