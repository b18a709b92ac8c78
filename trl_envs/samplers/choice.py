"""Which in-process sampler samples the policy: the ``sampler_backend`` a trainer's config names.

* ``"generate"``: :class:`~trl_envs.samplers.hf.HFSampler`, one ``generate`` call per turn (the default).
* ``"static_cache"``: :class:`~trl_envs.samplers.static_cache.StaticCacheSampler`, ``generate`` with a static KV cache,
  whose decoding step transformers compiles on a GPU (CUDA graphs).
* ``"continuous_batching"``: :class:`~trl_envs.samplers.continuous.ContinuousBatchingSampler`, transformers'
  continuous batching; each episode's request starts as soon as the episode asks.

All three give the same rows: the sampled tokens, their logprobs (``softmax(logits / temperature)``) and the finish
reasons. See docs/fast_sampling.md for how to choose.
"""

from __future__ import annotations

from typing import Any

from .base import Sampler

SAMPLER_BACKENDS = ("generate", "static_cache", "continuous_batching")


def build_sampler(
    backend: str,
    model,
    tokenizer,
    *,
    continuous_batching_config: Any = None,
    keep_running: bool = False,
    **settings: Any,
) -> Sampler:
    """The sampler ``backend`` (one of :data:`SAMPLER_BACKENDS`) on ``model``.

    Args:
        backend: the backend's name.
        model, tokenizer: the policy and its tokenizer.
        continuous_batching_config: ``"continuous_batching"`` only: transformers' ``ContinuousBatchingConfig`` or a
            dict of its fields.
        keep_running: ``"continuous_batching"`` only: keep its loop running between calls (a model that never trains).
        **settings: :class:`~trl_envs.samplers.hf.HFSampler` keyword arguments (temperature, top_p, top_k, min_p,
            repetition_penalty, model_context, generation_kwargs).

    Raises:
        ValueError: an unknown backend, or settings the backend cannot honour (named).
    """
    if backend == "generate":
        from .hf import HFSampler

        return HFSampler(model, tokenizer, **settings)
    if backend == "static_cache":
        from .static_cache import StaticCacheSampler

        return StaticCacheSampler(model, tokenizer, **settings)
    if backend == "continuous_batching":
        from .continuous import ContinuousBatchingSampler

        if settings.pop("cache_implementation", None) is not None:
            raise ValueError(
                "cache_implementation does not apply to sampler_backend='continuous_batching' (it uses its own paged "
                "cache); leave cache_implementation unset."
            )
        return ContinuousBatchingSampler(
            model,
            tokenizer,
            continuous_batching_config=continuous_batching_config,
            keep_running=keep_running,
            **settings,
        )
    raise ValueError(f"sampler_backend must be one of {list(SAMPLER_BACKENDS)}, got {backend!r}")


__all__ = ["SAMPLER_BACKENDS", "build_sampler"]
