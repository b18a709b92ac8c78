"""Checks that run before any model is loaded, so a mistake costs a second, not a model load or a training run.

Each check raises :class:`~trl_envs.errors.types.UsageError` naming the flag and the value (shortened) that is wrong;
:func:`~trl_envs.cli.errors.run_command` prints it as one line. The training scripts and ``trl-envs eval`` call them
first thing; the trainers' configs and the Hub steps call the ones that concern them.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from typing import Any

from .messages import shorten
from .types import UsageError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def check_model_path(value: str | None, flag: str = "--model_name_or_path") -> None:
    """``value`` is an existing model folder, or a Hub id (``org/name``, or a bare name the local Hugging Face cache
    holds) left to the Hub: a path that does not exist, a file, or a bare name that is neither a folder here nor a
    cached model is refused."""
    if value is None:
        return
    path = os.path.expanduser(value)
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise UsageError(
                f"{flag} {shorten(value)} is a file; give a model folder (holding config.json) or a Hub "
                "id such as Qwen/Qwen2.5-0.5B-Instruct"
            )
        return
    looks_like_path = (
        value.startswith((".", "/", "~"))
        or "\\" in value
        or value.endswith("/")
        or value.count("/") > 1
        or not _HUB_ID.match(value)
        or ".." in value
    )
    if looks_like_path:
        raise UsageError(f"{flag} {shorten(value)}: no such folder (and not a Hub id of the form org/name)")
    if "/" not in value and not _in_hub_cache(value):
        near = [p for p in (os.path.join("outputs", value),) if os.path.isdir(p)]
        hint = f"did you mean {near[0]}? Otherwise " if near else ""
        raise UsageError(
            f"{flag} {shorten(value)}: no such folder in {os.getcwd()}, and not a Hub id (org/name); {hint}give "
            "the model folder's path (e.g. outputs/grpo-arithmetic) or a Hub id such as Qwen/Qwen2.5-0.5B-Instruct"
        )


HUB_MODEL_FILES = ("config.json", "adapter_config.json")
"""A Hub model repo holds one of these (a full model, a PEFT adapter)."""


def _in_hub_cache(repo_id: str, revision: str | None = None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return any(
            isinstance(try_to_load_from_cache(repo_id, name, revision=revision), str) for name in HUB_MODEL_FILES
        )
    except ValueError:  # not a valid repo id
        return False


def check_hub_model(value: str | None, flag: str = "--model_name_or_path", revision: str | None = None) -> None:
    """A Hub id ``value`` (not a local folder) can be loaded: it is in the local cache, or the Hub answers for it.
    Offline (``HF_HUB_OFFLINE=1``) or without a network, a model that is not cached is refused at once, instead of
    after the loaders' retries."""
    if value is None or os.path.isdir(os.path.expanduser(value)) or _in_hub_cache(value, revision):
        return
    from huggingface_hub import HfApi
    from huggingface_hub.constants import HF_HUB_CACHE, is_offline_mode
    from huggingface_hub.errors import RepositoryNotFoundError

    if is_offline_mode():
        raise UsageError(
            f"{flag} {shorten(value)}: not in the local Hugging Face cache ({HF_HUB_CACHE}) and HF_HUB_OFFLINE=1 "
            f"keeps the Hub out; download it first (hf download {value}) or unset HF_HUB_OFFLINE"
        )
    try:
        HfApi().model_info(value, revision=revision, timeout=10)
    except RepositoryNotFoundError:
        raise UsageError(
            f"{flag} {shorten(value)}: no such model on the Hub (or it is private: log in with `hf auth login`), "
            "and no such folder here"
        ) from None
    except Exception as e:  # noqa: BLE001 - a gated repo, a bad token: left to the loader, whose message says so
        if _is_network_error(e):
            raise UsageError(
                f"{flag} {shorten(value)}: not in the local Hugging Face cache and the Hub cannot be reached "
                f"({type(e).__name__}: {shorten(str(e), 200)}); check the network, or download the model where "
                "there is one"
            ) from None


def _is_network_error(error: BaseException) -> bool:
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(names & {"ConnectError", "TimeoutException", "NetworkError", "ConnectionError", "Timeout"}) or (
        isinstance(error, OSError) and not type(error).__module__.startswith("huggingface_hub")
    )


def check_sampling(temperature: float | None, top_p: float | None = None, prefix: str = "--") -> None:
    """``temperature`` >= 0 (0: greedy) and ``top_p`` in (0, 1]."""
    if temperature is not None and (not math.isfinite(temperature) or temperature < 0):
        raise UsageError(f"{prefix}temperature {temperature}: must be >= 0 (0 samples greedily)")
    if top_p is not None and (not math.isfinite(top_p) or not 0 < top_p <= 1):
        raise UsageError(f"{prefix}top_p {top_p}: must be in (0, 1]")


def check_counts(prefix: str = "--", **counts: int | None) -> None:
    """Every given count is an integer >= 1 (``None``: not given, or no limit)."""
    for name, value in counts.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{prefix}{name} {shorten(value)}: must be an integer >= 1")


def check_pass_k(ks: Sequence[int] | None, samples_per_problem: int) -> None:
    """Every k of pass@k is between 1 and the samples per problem."""
    check_counts(samples_per_problem=samples_per_problem)
    bad = [k for k in ks or () if not 1 <= k <= samples_per_problem]
    if bad:
        raise UsageError(
            f"--pass_k {' '.join(map(str, bad))}: pass@k needs 1 <= k <= --samples_per_problem "
            f"({samples_per_problem}); sample more per problem or ask for a smaller k"
        )


def check_data_columns(
    path: str, required: Sequence[str], flag: str, alternatives: Sequence[Sequence[str]] = ()
) -> None:
    """A local JSON / JSONL / CSV / Parquet data file has the ``required`` columns (or one of the ``alternatives``),
    read from its first row; other paths (Hub ids, folders) are left to the loader."""
    if not os.path.isfile(path):
        return
    columns = _first_row_columns(path)
    if columns is None:
        return
    for wanted in (required, *alternatives):
        if all(c in columns for c in wanted):
            return
    missing = [c for c in required if c not in columns]
    raise UsageError(
        f"{flag} {shorten(path)}: no {' and no '.join(map(repr, missing))} column; a preference file "
        f"needs {list(required)}; its columns are {sorted(columns)[:20]}"
    )


def _first_row_columns(path: str) -> list[str] | None:
    import json

    lower = path.lower()
    try:
        if lower.endswith((".jsonl", ".json")):
            with open(path, encoding="utf-8") as f:
                head = f.read(1 << 20).lstrip()
            if head.startswith("["):
                rows = json.loads(open(path, encoding="utf-8").read())
                return list(rows[0]) if rows and isinstance(rows[0], dict) else None
            first = head.splitlines()[0] if head else ""
            row = json.loads(first) if first else None
            return list(row) if isinstance(row, dict) else None
        if lower.endswith(".csv"):
            import csv

            with open(path, newline="", encoding="utf-8") as f:
                return next(csv.reader(f), None)
        if lower.endswith(".parquet"):
            import pyarrow.parquet as pq

            return list(pq.read_schema(path).names)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read the data file {shorten(path)}: {type(e).__name__}: {shorten(str(e))}") from None
    return None


def check_hub_access(repo_id: str, token: str | None = None, private: bool | None = None) -> str:
    """Create (or find) the Hub repo ``repo_id`` with ``token`` now, before training, so a bad token, a repo id that
    is not yours or an unreachable Hub shows at once; returns the repo URL."""
    from huggingface_hub import HfApi
    from huggingface_hub.constants import is_offline_mode

    if is_offline_mode():
        raise UsageError(
            "--push_to_hub: huggingface_hub is in offline mode (HF_HUB_OFFLINE=1), nothing could be "
            "pushed; unset HF_HUB_OFFLINE or drop --push_to_hub"
        )
    try:
        return str(HfApi(token=token).create_repo(repo_id, private=private, repo_type="model", exist_ok=True))
    except Exception as e:  # noqa: BLE001 - every failure here means the push at the end would fail too
        raise UsageError(
            f"--push_to_hub: cannot create or reach the Hub repo {shorten(repo_id)} before training "
            f"({type(e).__name__}: {shorten(str(e), 300)}). Check the network, --hub_token or "
            "`hf auth login`, and --hub_model_id"
        ) from None


def check_group_geometry(
    num_generations: int,
    per_device_train_batch_size: int,
    gradient_accumulation_steps: int,
    world_size: int = 1,
    generation_batch_size: int | None = None,
    steps_per_generation: int | None = None,
) -> None:
    """The rows of one generation round hold whole groups: named by the flags a user types."""
    if generation_batch_size is not None or steps_per_generation is not None:
        return  # set explicitly: TRL's own message names them
    rows = per_device_train_batch_size * gradient_accumulation_steps * world_size
    if num_generations >= 1 and rows % num_generations:
        processes = f" × {world_size} processes" if world_size > 1 else ""
        raise UsageError(
            f"--per_device_train_batch_size {per_device_train_batch_size} × --gradient_accumulation_steps "
            f"{gradient_accumulation_steps}{processes} = {rows} rows per step is not a multiple of --num_generations "
            f"{num_generations} (the group size): choose a batch size that is a multiple of it, e.g. "
            f"--per_device_train_batch_size {_next_multiple(per_device_train_batch_size, num_generations)}"
        )


def _next_multiple(n: int, k: int) -> int:
    return max(k, -(-n // k) * k)


def check_output_dir(value: str | None, flag: str = "--output_dir") -> None:
    """``value`` is a folder, or can become one: not an existing file, nor under one."""
    if not value:
        return
    path = os.path.abspath(os.path.expanduser(value))
    while path and not os.path.exists(path):
        path = os.path.dirname(path) if os.path.dirname(path) != path else ""
    if path and not os.path.isdir(path):
        where = "is a file" if path == os.path.abspath(os.path.expanduser(value)) else f"is under the file {path}"
        raise UsageError(f"{flag} {shorten(value)} {where}; give a folder (it is created if missing)")


def check_script_settings(script_args: Any, training_args: Any, model_args: Any) -> None:
    """Everything the training scripts can check before loading a model."""
    check_output_dir(getattr(training_args, "output_dir", None))
    check_model_path(getattr(model_args, "model_name_or_path", None))
    check_hub_model(
        getattr(model_args, "model_name_or_path", None), revision=getattr(model_args, "model_revision", None)
    )
    check_sampling(getattr(training_args, "temperature", None), getattr(training_args, "top_p", None))
    check_counts(
        **{
            name: getattr(script_args, name)
            for name in ("num_env_batches", "groups_per_batch", "groups_per_round", "group_size")
            if getattr(script_args, name, None) is not None
        }
    )


__all__ = [
    "check_counts",
    "check_data_columns",
    "check_group_geometry",
    "check_hub_access",
    "check_hub_model",
    "check_model_path",
    "check_output_dir",
    "check_pass_k",
    "check_sampling",
    "check_script_settings",
]
