""":class:`HFSampler`: the :class:`~trl_envs.samplers.base.Sampler` protocol on a
``transformers`` model with ``generate`` (left padding, per-request stop tokens / strings and token budgets, and
the logprob of every sampled token).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from ..core.types import TokensWithLogprobs
from .base import SampleRequest, Sampler, StopSpec


class HFSampler:
    """A :class:`Sampler` on a ``transformers`` causal LM, one ``generate`` call per :meth:`sample` call.

    Logprobs are those of the sampled tokens under ``softmax(logits / temperature)`` — the same quantity TRL's
    GRPO computes for the policy, so they can serve for importance-sampling corrections.

    Args:
        model: the causal LM (or a callable returning a context manager that yields it, see ``model_context``).
        tokenizer: its tokenizer (for ``pad_token_id``, EOS, and decoding when stop strings are used).
        temperature, top_p, top_k, min_p, repetition_penalty: sampling settings; ``temperature=0`` is greedy.
        model_context: optional ``() -> contextmanager`` yielding the model to generate with (a trainer uses it
            to unwrap a distributed model and gather sharded parameters). Defaults to ``model`` as it is.
    """

    def __init__(self, model, tokenizer, *, temperature: float = 1.0, top_p: float = 1.0, top_k: int | None = None,
                 min_p: float | None = None, repetition_penalty: float = 1.0,
                 model_context: Callable[[], contextlib.AbstractContextManager] | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.top_p, self.top_k, self.min_p, self.repetition_penalty = top_p, top_k, min_p, repetition_penalty
        self.model_context = model_context
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
        width = max(len(r.prompt) for r in requests)
        input_ids = torch.full((len(requests), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(requests), width), dtype=torch.long)
        for i, r in enumerate(requests):
            input_ids[i, width - len(r.prompt):] = torch.tensor(r.prompt, dtype=torch.long)
            attention_mask[i, width - len(r.prompt):] = 1
        stops = [StopSpec.of(r.stop, self.eos_token_id) for r in requests]
        greedy = self.temperature == 0
        recorder = _LogprobRecorder(1.0 if greedy else self.temperature)
        criteria = _PerRowStop(stops, [r.max_tokens for r in requests], width, self.tokenizer)
        config = GenerationConfig(
            do_sample=not greedy,
            max_new_tokens=max(r.max_tokens for r in requests),
            temperature=None if greedy else self.temperature,
            top_p=None if greedy else self.top_p,
            top_k=None if greedy else self.top_k,
            min_p=None if greedy else self.min_p,
            repetition_penalty=self.repetition_penalty,
            pad_token_id=self.pad_token_id,
            eos_token_id=self.eos_token_id,
        )
        with self._model() as model, torch.no_grad():
            device = next(model.parameters()).device
            was_training = model.training
            model.eval()
            try:
                out = model.generate(
                    input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                    generation_config=config, logits_processor=LogitsProcessorList([recorder]),
                    stopping_criteria=StoppingCriteriaList([criteria]),
                )
            finally:
                model.train(was_training)
            generated = out[:, width:]
            logprobs = recorder.finish(generated)
        results = []
        for i, r in enumerate(requests):
            tokens = generated[i].tolist()
            n, reason = stops[i].cut(tokens, r.max_tokens, self.tokenizer)
            results.append(TokensWithLogprobs(tokens[:n], logprobs[i, :n].tolist(), reason))
        return results


class _PerRowStop(StoppingCriteria):
    """Marks a row finished when it produced one of its own stop tokens/strings or used its own token budget."""

    def __init__(self, stops: list[StopSpec], max_tokens: list[int], prompt_width: int, tokenizer):
        self.stops, self.max_tokens, self.prompt_width, self.tokenizer = stops, max_tokens, prompt_width, tokenizer

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        n_gen = input_ids.shape[1] - self.prompt_width
        last = input_ids[:, -1].tolist()
        done = []
        for i, spec in enumerate(self.stops):
            hit = last[i] in spec.token_ids or n_gen >= self.max_tokens[i]
            if not hit and spec.strings:
                hit = spec.text_hit(input_ids[i, self.prompt_width:].tolist(), self.tokenizer)
            done.append(hit)
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class _LogprobRecorder(LogitsProcessor):
    """Records ``log_softmax(logits / temperature)`` of each sampled token without keeping all the logits.

    Processors passed to ``generate`` run before the sampling warpers (temperature, top-k, top-p), so ``scores``
    here are the model's logits (after repetition penalty). At step t the newest column of ``input_ids`` is the
    token sampled at step t-1, whose logprob is read from the distribution stored at step t-1.
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
            self.values.append(self.prev.gather(1, generated[:, len(self.values):len(self.values) + 1]).squeeze(1))
        self.prev = None
        return torch.stack(self.values, dim=1).cpu()


__all__ = ["HFSampler", "SampleRequest", "Sampler"]  # the protocol is defined in samplers/base.py
