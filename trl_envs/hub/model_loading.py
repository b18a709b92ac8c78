"""Load what training saved (a full model or a PEFT adapter), by path or Hub id, to play envs with it."""

from __future__ import annotations

import os

ADAPTER_CONFIG = "adapter_config.json"


def is_adapter(name_or_path: str, revision: str | None = None) -> bool:
    """Whether ``name_or_path`` (a directory or a Hub id) holds a PEFT adapter (an ``adapter_config.json``)."""
    if os.path.isdir(name_or_path):
        return os.path.isfile(os.path.join(name_or_path, ADAPTER_CONFIG))
    from huggingface_hub import file_exists, try_to_load_from_cache
    from huggingface_hub.errors import EntryNotFoundError, OfflineModeIsEnabled, RepositoryNotFoundError

    cached = try_to_load_from_cache(name_or_path, ADAPTER_CONFIG, revision=revision)
    if isinstance(cached, str):
        return True
    try:
        return file_exists(name_or_path, ADAPTER_CONFIG, revision=revision)
    except (OfflineModeIsEnabled, RepositoryNotFoundError, EntryNotFoundError):
        return False


def load_policy(name_or_path: str, *, device: str | None = None, dtype: str | None = None, revision: str | None = None):
    """``(model, tokenizer)`` for ``name_or_path``: a full causal LM, or a PEFT adapter on its base model.

    The tokenizer is taken from ``name_or_path`` when it has one (the training scripts save it next to the adapter),
    else from the adapter's base model. ``device`` defaults to ``cuda`` when available, else ``cpu``; ``dtype``
    (e.g. ``"bfloat16"``) to the checkpoint's. The model is returned in eval mode.

    Raises:
        OSError: from transformers / PEFT, naming the path, when nothing loadable is there.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    kwargs = {"revision": revision, "dtype": dtype or "auto"}
    if is_adapter(name_or_path, revision):
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(name_or_path, **kwargs)
        base = model.active_peft_config.base_model_name_or_path
        tokenizer = _saved_tokenizer(name_or_path, revision) or AutoTokenizer.from_pretrained(base)
    else:
        model = AutoModelForCausalLM.from_pretrained(name_or_path, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, revision=revision)
    return model.to(device).eval(), tokenizer


def _saved_tokenizer(name_or_path: str, revision: str | None):
    from transformers import AutoTokenizer

    if os.path.isdir(name_or_path) and not os.path.isfile(os.path.join(name_or_path, "tokenizer_config.json")):
        return None
    try:
        return AutoTokenizer.from_pretrained(name_or_path, revision=revision)
    except (OSError, ValueError):
        return None
