""":class:`HFSampler`: the :class:`~trl_envs.samplers.base.Sampler` protocol on a
``transformers`` model with ``generate`` (left padding, per-request stop tokens / strings and token budgets, and
the logprob of every sampled token).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    StoppingCriteria,
    StoppingCriteriaList,
)

from ..core.types import TokensWithLogprobs
from .base import Sampler, SampleRequest, StopSpec


class HFSampler:
    """A :class:`Sampler` on a ``transformers`` causal LM, one ``generate`` call per :meth:`sample` call.

    Logprobs are those of the sampled tokens under ``softmax(logits / temperature)`` of the model's own logits
    (before repetition penalty, top-k, top-p) — the quantity TRL's GRPO computes for the policy in training, so the
    two agree (an off-policy mask or importance weight compares them).

    Args:
        model: the causal LM (or a callable returning a context manager that yields it, see ``model_context``).
        tokenizer: its tokenizer (for ``pad_token_id``, EOS, and decoding when stop strings are used).
        temperature, top_p, top_k, min_p, repetition_penalty: sampling settings; ``temperature=0`` is greedy.
        model_context: optional ``() -> contextmanager`` yielding the model to generate with (a trainer uses it
            to unwrap a distributed model and gather sharded parameters). Defaults to ``model`` as it is.
        generation_kwargs: more ``GenerationConfig`` fields (as TRL's ``GRPOConfig.generation_kwargs``); they
            override the settings above. Budgets, stop tokens and padding are per request and cannot be set here.
        cache_implementation: the KV cache ``generate`` uses (TRL's ``GRPOConfig.cache_implementation``).

    Raises:
        ValueError: ``generation_kwargs`` names a field the sampler sets per request.
    """

    def __init__(
        self,
        model,
        tokenizer,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int | None = None,
        min_p: float | None = None,
        repetition_penalty: float = 1.0,
        model_context: Callable[[], contextlib.AbstractContextManager] | None = None,
        generation_kwargs: dict | None = None,
        cache_implementation: str | None = None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.generation_kwargs = dict(generation_kwargs or {})
        owned = sorted(REQUEST_OWNED_FIELDS & self.generation_kwargs.keys())
        if owned:
            raise ValueError(
                f"HFSampler: generation_kwargs sets {owned}, which the sampler sets per request from "
                "each request's max_tokens and stop condition; remove them (use the rollout budgets)."
            )
        repetition_penalty = self.generation_kwargs.pop("repetition_penalty", repetition_penalty)
        self.top_p, self.top_k, self.min_p, self.repetition_penalty = top_p, top_k, min_p, repetition_penalty
        self.cache_implementation = cache_implementation
        self.model_context = model_context
        hidden = sorted(LOGIT_CHANGING_FIELDS & self.generation_kwargs.keys())
        if hidden:
            warnings.warn(
                f"HFSampler: generation_kwargs {hidden} change the logits before the sampled tokens' "
                "logprobs are recorded, so those logprobs differ from TRL's training logprobs.",
                stacklevel=2,
            )
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError("HFSampler: the tokenizer has neither a pad token nor an EOS token to pad with")
        self.pad_token_id = pad
        self.eos_token_id = tokenizer.eos_token_id

    @contextlib.contextmanager
    def _model(self) -> Iterator:
        if self.model_context is None:
            yield self.model
        else:
            with self.model_context() as m:
                yield m

    def sample(self, requests: list[SampleRequest]) -> list[TokensWithLogprobs]:
        if not requests:
            return []
        for i, r in enumerate(requests):
            if r.max_tokens < 1:
                raise ValueError(f"HFSampler: request {i} asks for max_tokens={r.max_tokens}; must be >= 1")
            if not r.prompt:
                raise ValueError(f"HFSampler: request {i} has an empty prompt")
        real = len(requests)
        requests = self._rows(requests)
        width = self._width(max(len(r.prompt) for r in requests))
        # Left padding, built as Python lists and turned into tensors once (one tensor per row costs more than the
        # tiny model's forward pass).
        input_ids = torch.tensor(
            [[self.pad_token_id] * (width - len(r.prompt)) + list(r.prompt) for r in requests], dtype=torch.long
        )
        attention_mask = torch.tensor(
            [[0] * (width - len(r.prompt)) + [1] * len(r.prompt) for r in requests], dtype=torch.long
        )
        stops = [StopSpec.of(r.stop, self.eos_token_id) for r in requests]
        greedy = self.temperature == 0
        recorder = _LogprobRecorder(1.0 if greedy else self.temperature)
        criteria = _PerRowStop(stops, [r.max_tokens for r in requests], width, self.tokenizer)
        settings = dict(
            do_sample=not greedy,
            temperature=None if greedy else self.temperature,
            top_p=None if greedy else self.top_p,
            top_k=None if greedy else self.top_k,
            min_p=None if greedy else self.min_p,
            cache_implementation=self.cache_implementation,
        )
        settings.update(self.generation_kwargs)
        max_new_tokens = max(r.max_tokens for r in requests)
        settings.update(self._cache_fields(width, max_new_tokens))
        config = GenerationConfig(
            **settings,
            max_new_tokens=max_new_tokens,
            pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_id,
        )
        # Custom processors run after generate's own and before the sampling warpers: the recorder sees the model's
        # logits, then the repetition penalty (kept out of `config` so it runs after the recorder) shapes sampling.
        processors = LogitsProcessorList([recorder])
        if self.repetition_penalty != 1.0:
            processors.append(RepetitionPenaltyLogitsProcessor(self.repetition_penalty))
        with self._model() as model, torch.no_grad():
            device = next(model.parameters()).device
            was_training = model.training
            if was_training and train_mode_changes_outputs(model):
                model.eval()
            try:
                out = model.generate(
                    input_ids=input_ids.to(device),
                    attention_mask=attention_mask.to(device),
                    generation_config=config,
                    logits_processor=processors,
                    stopping_criteria=StoppingCriteriaList([criteria]),
                )
            finally:
                if model.training != was_training:
                    model.train(was_training)
            generated = out[:, width:]
            logprobs = recorder.finish(generated)
        results = []
        for r, stop, tokens, row_logprobs in zip(requests, stops, generated.tolist(), logprobs.tolist()):
            n, reason = stop.cut(tokens, r.max_tokens, self.tokenizer)
            results.append(TokensWithLogprobs(tokens[:n], row_logprobs[:n], reason))
        return results[:real]

    # -- what a subclass may change about the generate call (static_cache.StaticCacheSampler) ---------------------

    def _rows(self, requests: list[SampleRequest]) -> list[SampleRequest]:
        """The rows of the ``generate`` call: ``requests`` first (their results are returned), then any padding rows."""
        return requests

    def _width(self, longest_prompt: int) -> int:
        """The left-padded prompt width of the call, at least ``longest_prompt``."""
        return longest_prompt

    def _cache_fields(self, width: int, max_new_tokens: int) -> dict:
        """``GenerationConfig`` fields about the KV cache of a call with this prompt width and token budget."""
        return {}


REQUEST_OWNED_FIELDS = frozenset(
    {
        "max_new_tokens",
        "max_length",
        "eos_token_id",
        "pad_token_id",
        "stop_strings",
        "num_return_sequences",
        "num_beams",
    }
)
"""``GenerationConfig`` fields :class:`HFSampler` sets itself (per request) and refuses in ``generation_kwargs``."""

LOGIT_CHANGING_FIELDS = frozenset(
    {
        "no_repeat_ngram_size",
        "bad_words_ids",
        "sequence_bias",
        "suppress_tokens",
        "begin_suppress_tokens",
        "min_length",
        "min_new_tokens",
        "forced_bos_token_id",
        "forced_eos_token_id",
        "exponential_decay_length_penalty",
        "encoder_repetition_penalty",
        "renormalize_logits",
    }
)
"""``GenerationConfig`` fields whose logits processors run before the logprob recorder (transformers runs the
processors it builds before custom ones)."""


class _PerRowStop(StoppingCriteria):
    """Marks a row finished when it produced one of its own stop tokens/strings or used its own token budget.

    Stop tokens and budgets are checked on the whole batch at once (one comparison per decoding step, no Python loop
    over rows); only rows with stop strings decode their tokens.
    """

    def __init__(self, stops: list[StopSpec], max_tokens: list[int], prompt_width: int, tokenizer):
        self.stops, self.prompt_width, self.tokenizer = stops, prompt_width, tokenizer
        widest = max((len(spec.token_ids) for spec in stops), default=0)
        self.stop_ids = torch.tensor(
            [sorted(spec.token_ids) + [-1] * (widest - len(spec.token_ids)) for spec in stops], dtype=torch.long
        ).view(len(stops), widest)
        self.max_tokens = torch.tensor(max_tokens, dtype=torch.long)
        self.string_rows = [i for i, spec in enumerate(stops) if spec.strings]

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        if self.stop_ids.device != input_ids.device:
            self.stop_ids, self.max_tokens = self.stop_ids.to(input_ids.device), self.max_tokens.to(input_ids.device)
        n_gen = input_ids.shape[1] - self.prompt_width
        done = (input_ids[:, -1:] == self.stop_ids).any(dim=1) | (self.max_tokens <= n_gen)
        for i in self.string_rows:
            if not done[i] and self.stops[i].text_hit(input_ids[i, self.prompt_width :].tolist(), self.tokenizer):
                done[i] = True
        return done


class _LogprobRecorder(LogitsProcessor):
    """Records ``log_softmax(logits / temperature)`` of each sampled token without keeping all the logits.

    Processors passed to ``generate`` run before the sampling warpers (temperature, top-k, top-p) and this one runs
    first of them, so ``scores`` here are the model's logits (``HFSampler`` applies the repetition penalty after it). At
    step t the newest column of ``input_ids`` is the token sampled at step t-1, whose logprob is read from the
    distribution stored at step t-1.
    """

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.prev: torch.Tensor | None = None
        self.values: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prev is not None:
            self.values.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, generated: torch.LongTensor) -> torch.Tensor:
        """Logprobs aligned with ``generated`` (B, T)."""
        if self.prev is not None and len(self.values) < generated.shape[1]:
            self.values.append(self.prev.gather(1, generated[:, len(self.values) : len(self.values) + 1]).squeeze(1))
        self.prev = None
        return torch.stack(self.values, dim=1).cpu()


__all__ = ["HFSampler", "SampleRequest", "Sampler"]  # the protocol is defined in samplers/base.py


_TRAIN_MODE_LAYERS = (
    torch.nn.Dropout,
    torch.nn.Dropout1d,
    torch.nn.Dropout2d,
    torch.nn.Dropout3d,
    torch.nn.AlphaDropout,
    torch.nn.FeatureAlphaDropout,
    torch.nn.BatchNorm1d,
    torch.nn.BatchNorm2d,
    torch.nn.BatchNorm3d,
    torch.nn.SyncBatchNorm,
)


def train_mode_changes_outputs(model: torch.nn.Module) -> bool:
    """Whether ``model`` computes differently in training mode than in evaluation mode: it has a dropout layer with
    ``p > 0`` or a batch norm, or its config (or a sub-config) sets a dropout rate above 0 (attention dropout is
    applied functionally, from the config).

    Sampling switches the model to ``eval()`` only then: otherwise its outputs are the same either way, and
    ``train()`` / ``eval()`` on a ``transformers`` model can re-kernelize every module, a fixed cost per call.
    """
    if _config_sets_dropout(getattr(model, "config", None)):
        return True
    return any(isinstance(m, _TRAIN_MODE_LAYERS) and getattr(m, "p", 1.0) > 0 for m in model.modules())


def _config_sets_dropout(config, depth: int = 0) -> bool:
    if config is None or depth > 2 or not hasattr(config, "to_dict"):
        return False
    for name, value in vars(config).items():
        if hasattr(value, "to_dict") and _config_sets_dropout(value, depth + 1):
            return True
        if ("dropout" in name or "pdrop" in name) and isinstance(value, (int, float)) and value > 0:
            return True
    return False
