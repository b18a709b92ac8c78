""":class:`StaticCacheSampler`: :class:`~trl_envs.samplers.hf.HFSampler` with a static KV cache, so that
``transformers`` compiles the decoding step (CUDA graphs on a GPU).

A small model on a GPU spends most of a ``generate`` call launching kernels, one decoding step at a time. With a
static (preallocated, fixed-shape) KV cache, ``transformers`` compiles the decoding step on its own when the model is
on a GPU (``torch.compile``, mode ``reduce-overhead``: CUDA graphs), which replays each step's kernels at once. A
compiled step is specialised to its shapes (batch size and cache length), so this sampler buckets them: the batch is
padded with one-token dummy rows to the next power of two, and the cache is sized to the next multiple of
``cache_multiple`` tokens (never smaller than an earlier call's). Few shapes, few compilations.

Everything else is ``HFSampler``'s: the same rows, stop handling, logprobs (``softmax(logits / temperature)`` of the
model's own logits) and sampling settings. The compiled step reads the model's parameters where they live, so an
optimizer that updates them in place (every ``torch.optim`` optimizer does) is seen by the next call.
"""

from __future__ import annotations

import torch

from .base import SampleRequest
from .hf import HFSampler

DEFAULT_CACHE_MULTIPLE = 256


def let_dynamo_trace_output_capturing() -> None:
    """Give ``transformers.utils.output_capturing`` the ``torch`` its annotations name. Before transformers 5.25 that
    module imports ``torch`` only for type checking, and torch 2.6's dynamo, tracing a compiled decoding step through
    its ``capture_outputs`` wrapper, fails with ``NameError: name 'torch' is not defined`` (transformers 5.4 to 5.24;
    5.25 traces without it: docs/versions.md)."""
    try:
        from transformers.utils import output_capturing
    except ImportError:  # a transformers without the module: nothing to trace through
        return
    if not hasattr(output_capturing, "torch"):
        output_capturing.torch = torch


class StaticCacheSampler(HFSampler):
    """An :class:`HFSampler` whose ``generate`` calls use a static KV cache and bucketed shapes (module docstring).

    Args:
        model, tokenizer, **settings: as :class:`HFSampler` (temperature, top_p, ..., ``model_context``,
            ``generation_kwargs``); ``cache_implementation`` is ``"static"``.
        cache_multiple: the cache length (prompt width + token budget) is rounded up to a multiple of this.
        compile_config: a ``transformers.CompileConfig`` for the decoding step; ``None``: transformers' default,
            which compiles on a GPU and not on a CPU.

    Attributes:
        num_padding_rows: dummy rows added to calls so far to reach a bucketed batch size.
        batch_sizes, cache_lengths: the distinct bucketed shapes used so far (each is one compilation on a GPU).
    """

    def __init__(
        self, model, tokenizer, *, cache_multiple: int = DEFAULT_CACHE_MULTIPLE, compile_config=None, **settings
    ):
        if settings.pop("cache_implementation", "static") not in (None, "static"):
            raise ValueError("StaticCacheSampler: cache_implementation is 'static'; use HFSampler for another cache")
        if cache_multiple < 1:
            raise ValueError(f"StaticCacheSampler: cache_multiple must be >= 1, got {cache_multiple}")
        super().__init__(model, tokenizer, cache_implementation="static", **settings)
        let_dynamo_trace_output_capturing()
        self.cache_multiple = cache_multiple
        self.compile_config = compile_config
        self.num_padding_rows = 0
        self.batch_sizes: set[int] = set()
        self.cache_lengths: set[int] = set()
        self._cache_len = 0

    def _rows(self, requests: list[SampleRequest]) -> list[SampleRequest]:
        size = 1 << (len(requests) - 1).bit_length()
        self.batch_sizes.add(size)
        padding = size - len(requests)
        self.num_padding_rows += padding
        return list(requests) + [SampleRequest([self.pad_token_id], [], 1)] * padding

    def _cache_fields(self, width: int, max_new_tokens: int) -> dict:
        needed = width + max_new_tokens
        self._cache_len = max(self._cache_len, -(-needed // self.cache_multiple) * self.cache_multiple)
        self.cache_lengths.add(self._cache_len)
        fields = {"max_cache_len": self._cache_len}
        if self.compile_config is not None:
            fields["compile_config"] = self.compile_config
        return fields


__all__ = ["StaticCacheSampler"]
