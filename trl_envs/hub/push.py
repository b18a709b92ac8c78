"""Push a trained model's folder to the Hugging Face Hub with ``huggingface_hub``'s own upload path
(``HfApi.create_repo`` then ``HfApi.upload_folder``), as ``Trainer.push_to_hub`` does.

The endpoint is the Hub unless ``endpoint`` or ``HF_ENDPOINT`` says otherwise (a private Hub, or the tests' local
stand-in). The token is ``token``, else the one ``huggingface_hub`` finds (``HF_TOKEN``, ``hf auth login``).
"""

from __future__ import annotations

import os
from pathlib import Path

RUN_BOOKKEEPING = (".trl_envs.lock", "trl_envs_run.json")
"""A run's bookkeeping in its folder, never pushed: the folder's lock
(:data:`~trl_envs.trainers.checkpoints.LOCK_FILE`) and the record of which run owns it
(:data:`~trl_envs.cli.run_folder.RUN_RECORD`)."""

PUSH_IGNORE_PATTERNS = ["_*", "checkpoint-*", *RUN_BOOKKEEPING]
"""Not pushed: as in ``Trainer.push_to_hub``, private scratch files and intermediate checkpoints; and
:data:`RUN_BOOKKEEPING`."""


def files_to_push(folder: str | os.PathLike[str]) -> list[str]:
    """The paths (relative, ``/``-separated, sorted) of the files :func:`push_folder_to_hub` uploads from ``folder``:
    every file except :data:`PUSH_IGNORE_PATTERNS` and what ``huggingface_hub`` always skips (``.git``,
    ``.cache``, ...)."""
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

    root = Path(folder)
    paths = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    return sorted(filter_repo_objects(paths, ignore_patterns=PUSH_IGNORE_PATTERNS + list(DEFAULT_IGNORE_PATTERNS)))


def push_folder_to_hub(
    folder: str | os.PathLike[str],
    repo_id: str,
    *,
    token: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str = "Upload model trained with trl_envs",
    endpoint: str | None = None,
) -> str:
    """Create the model repo ``repo_id`` if needed and upload ``folder`` to it in one commit; return the repo URL.

    Args:
        folder: the directory to upload (model or adapter, tokenizer, model card, ...; see :func:`files_to_push`).
        repo_id: ``"namespace/name"``, or ``"name"`` for the token owner's namespace.
        token: a write token (default: the one ``huggingface_hub`` finds).
        private: make a newly created repo private (``None``: the namespace's default).
        revision: the branch to commit to (created from the default branch if missing; default: ``main``).
        endpoint: the Hub's URL (default: ``HF_ENDPOINT`` or https://huggingface.co).

    Raises:
        RuntimeError: in offline mode (``HF_HUB_OFFLINE=1``), before anything is sent.
        huggingface_hub.errors.HfHubHTTPError: when the Hub refuses (bad token, no write access, ...).
    """
    from huggingface_hub import HfApi
    from huggingface_hub.constants import is_offline_mode

    if is_offline_mode():
        raise RuntimeError(
            f"push_folder_to_hub: cannot push {folder} to {repo_id!r}: huggingface_hub is in offline "
            "mode (HF_HUB_OFFLINE=1); unset it to push"
        )
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"push_folder_to_hub: {folder} is not a directory")
    api = HfApi(endpoint=endpoint, token=token)
    repo_url = api.create_repo(repo_id, private=private, repo_type="model", exist_ok=True)
    if revision is not None and revision != "main":
        api.create_branch(repo_url.repo_id, branch=revision, exist_ok=True)
    api.upload_folder(
        repo_id=repo_url.repo_id,
        folder_path=folder,
        commit_message=commit_message,
        revision=revision,
        ignore_patterns=list(PUSH_IGNORE_PATTERNS),
    )
    return str(repo_url)
