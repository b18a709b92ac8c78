""":class:`ContinuousBatchingSampler`: the :class:`~trl_envs.samplers.base.Sampler` protocol on ``transformers``'
continuous batching (paged KV cache, requests join and leave the running batch one decoding step at a time).

Besides the synchronous :meth:`~ContinuousBatchingSampler.sample`, it takes requests one at a time while a session is
open (:meth:`~ContinuousBatchingSampler.submit`, a ``concurrent.futures.Future`` per request): the rollout engine's
batcher (``trl_envs.rollout.batching``) sends each episode's request as soon as the episode asks, so an episode's next
turn starts decoding while other episodes are still generating or waiting on their envs, instead of waiting for the
slowest episode of the turn.

Rows are what :class:`~trl_envs.samplers.hf.HFSampler` gives: each request has its own token budget and stop tokens
(``transformers`` stops a request on them); stop strings are found after the request ends (it runs to its budget,
then is cut at the first stop string, as ``HFSampler`` cuts). Logprobs are transformers' own, of
``softmax(logits / temperature)`` of the model's logits, which is the quantity ``HFSampler`` records as long as no
other setting reshapes the logits first: top_p, top_k, min_p, repetition_penalty and ``generation_kwargs`` are
refused.

A session (:meth:`~ContinuousBatchingSampler.session`) sets up transformers' manager (it allocates the paged cache and
switches the model to an attention implementation continuous batching supports), runs its generation thread, and on
exit stops it, frees the cache and restores the model's attention implementation, so the model trains as before.
``keep_running=True`` keeps one session open from the first call until :meth:`~ContinuousBatchingSampler.close`
(a sampler on a copy of the policy that never trains, like the async sampler process's).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from transformers import GenerationConfig
from transformers.generation import ContinuousBatchingConfig

from ..core.types import TokensWithLogprobs
from .base import SampleRequest, StopSpec

CPU_CACHE_DEFAULTS = {"num_blocks": 256, "page_size": 32, "max_batch_tokens": 1024}
"""Paged-cache sizes used on a CPU when the config sets none (transformers would size the cache from the machine's
memory, which takes minutes to set up)."""

GPU_MEMORY_DEFAULT = 0.5
"""``max_memory_percent`` on a GPU when the config sets none: TRL's training-aware default (the rest trains)."""

POLL_S = 0.05


NEEDS_TRANSFORMERS = "5.18"
"""The oldest transformers whose continuous batching this sampler drives as written: ``ContinuousBatchingConfig``'s
``page_size``, the manager's ``destroy`` and the model's attention implementation restored on ``stop`` (5.17 and
older differ in each; 5.4 to 5.6 also gave multi-turn requests that share cache blocks logprobs that are not the
model's). docs/versions.md says what was tried."""


def check_transformers_version(owner: str, version: str | None = None) -> None:
    """Raise a one-line ``ValueError`` when the installed transformers (or ``version``) is older than
    :data:`NEEDS_TRANSFORMERS`, naming ``owner`` (what asked for continuous batching), the version found, the version
    needed and the backends that work there."""
    import transformers
    from packaging.version import Version

    version = version or transformers.__version__
    if Version(version).release < Version(NEEDS_TRANSFORMERS).release:
        raise ValueError(
            f"{owner} needs transformers>={NEEDS_TRANSFORMERS} (the continuous batching API it drives); found "
            f"transformers {version}. Use sampler_backend='static_cache' or 'generate', or pip install "
            f'"transformers>={NEEDS_TRANSFORMERS}".'
        )


class ContinuousBatchingSampler:
    """A :class:`Sampler` on transformers' continuous batching (module docstring).

    Args:
        model: the causal LM (``transformers`` model, or a PEFT model around one).
        tokenizer: its tokenizer (pad / EOS ids; decoding for stop strings).
        temperature: sampling temperature; ``0`` is greedy.
        top_p, top_k, min_p, repetition_penalty: must stay at their neutral values (see the module docstring).
        model_context: optional ``() -> contextmanager`` yielding the model to generate with, entered for each session
            (a trainer uses it to unwrap a distributed model).
        generation_kwargs: refused when not empty (see the module docstring).
        continuous_batching_config: a ``transformers`` ``ContinuousBatchingConfig`` or a dict of its fields (TRL's
            ``transformers_continuous_batching_config``); ``return_logprobs`` is always on.
        keep_running: keep one session open from the first call until :meth:`close`.

    Raises:
        ValueError: a setting that reshapes the logits before the logprobs are taken.
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
        continuous_batching_config: ContinuousBatchingConfig | dict | None = None,
        keep_running: bool = False,
    ):
        reshaping = {
            "top_p": top_p not in (None, 1.0),
            "top_k": top_k not in (None, 0),
            "min_p": min_p not in (None, 0.0),
            "repetition_penalty": repetition_penalty not in (None, 1.0),
            "generation_kwargs": bool(generation_kwargs),
        }
        check_transformers_version("ContinuousBatchingSampler")
        refused = [name for name, set_ in reshaping.items() if set_]
        if refused:
            raise ValueError(
                f"ContinuousBatchingSampler: {refused} reshape the logits before transformers' continuous batching "
                "records the sampled tokens' logprobs, which would then differ from the policy's; leave them at "
                "their defaults or use sampler='generate'."
            )
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.model = model
        self.tokenizer = tokenizer
        self.temperature = temperature
        self.model_context = model_context
        self.keep_running = keep_running
        self.eos_token_id = tokenizer.eos_token_id
        greedy = temperature == 0
        self.generation_config = GenerationConfig(
            do_sample=not greedy,
            temperature=None if greedy else temperature,
            top_p=None,
            top_k=None,
            pad_token_id=pad,
            eos_token_id=self.eos_token_id,
            max_new_tokens=1,  # every request sets its own
        )
        if isinstance(continuous_batching_config, ContinuousBatchingConfig):
            continuous_batching_config = {
                k: getattr(continuous_batching_config, k) for k in vars(continuous_batching_config)
            }
        self.config_fields = dict(continuous_batching_config or {})
        self.config_fields["return_logprobs"] = True
        self._lock = threading.Lock()
        self._futures: dict[str, tuple[Future, SampleRequest, StopSpec]] = {}
        self._manager = None
        self._exit: contextlib.ExitStack | None = None
        self._collector: tuple[threading.Thread, threading.Event] | None = None
        self._depth = 0
        self.num_sessions = 0
        self.num_requests = 0

    # -- sessions ------------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def session(self) -> Iterator[ContinuousBatchingSampler]:
        """Keep the continuous-batching loop running inside this block (re-entrant): :meth:`submit` needs one."""
        with self._lock:
            self._depth += 1
            opening = self._manager is None
        try:
            if opening:
                self._open()
            yield self
        finally:
            with self._lock:
                self._depth -= 1
                closing = self._depth == 0 and not self.keep_running
            if closing:
                self._shut()

    def close(self) -> None:
        """Stop the loop of a ``keep_running`` sampler (no request may be in flight); safe to call twice."""
        if self._manager is not None and self._depth == 0:
            self._shut()

    def _open(self) -> None:
        stack = contextlib.ExitStack()
        try:
            model = stack.enter_context(self.model_context()) if self.model_context is not None else self.model
            was_training = model.training
            stack.callback(model.train, was_training)
            fields = dict(self.config_fields)
            device = next(model.parameters()).device
            if device.type == "cpu" and not {"num_blocks", "max_batch_tokens", "max_memory_percent"} & fields.keys():
                fields.update(CPU_CACHE_DEFAULTS)
            elif device.type != "cpu":
                fields.setdefault("max_memory_percent", GPU_MEMORY_DEFAULT)
            manager = model.init_continuous_batching(
                generation_config=self.generation_config,
                continuous_batching_config=ContinuousBatchingConfig(**fields),
            )
            stack.callback(manager.destroy)
            stack.callback(manager.stop, block=True, keep_for_next_session=False)
            manager.start()
        except BaseException:
            stack.close()
            raise
        stopping = threading.Event()
        collector = threading.Thread(
            target=self._collect, args=(manager, stopping), name="trl_envs-cb-results", daemon=True
        )
        collector.start()
        self._manager, self._exit, self._collector = manager, stack, (collector, stopping)
        self.num_sessions += 1

    def _shut(self) -> None:
        stack, collector = self._exit, self._collector
        self._manager = self._exit = self._collector = None
        try:
            if stack is not None:
                stack.close()  # stops the loop (it finishes the requests in flight), frees it, restores the model
        finally:
            if collector is not None:
                thread, stopping = collector
                stopping.set()
                thread.join()
            self._fail_all(RuntimeError("ContinuousBatchingSampler: the session ended before the request finished"))

    # -- requests ------------------------------------------------------------------------------------------------

    def submit(self, request: SampleRequest) -> Future:
        """Start sampling ``request`` now (a session must be open); the future resolves to its
        :class:`TokensWithLogprobs`."""
        if request.max_tokens < 1:
            raise ValueError(
                f"ContinuousBatchingSampler: a request asks for max_tokens={request.max_tokens}; must be >= 1"
            )
        if not request.prompt:
            raise ValueError("ContinuousBatchingSampler: a request has an empty prompt")
        manager = self._manager
        if manager is None:
            raise RuntimeError("ContinuousBatchingSampler.submit needs an open session (`with sampler.session():`)")
        stop = StopSpec.of(request.stop, self.eos_token_id)
        future: Future = Future()
        with self._lock:
            self.num_requests += 1
            request_id = f"trl_envs_{self.num_requests}"
            self._futures[request_id] = (future, request, stop)
        stop_ids = sorted(stop.token_ids) or [-1]
        added = manager.add_request(
            list(request.prompt),
            request_id=request_id,
            max_new_tokens=request.max_tokens,
            eos_token_id=stop_ids,
        )
        if added is None:
            with self._lock:
                self._futures.pop(request_id, None)
            raise RuntimeError("ContinuousBatchingSampler: transformers' continuous batching refused the request")
        return future

    def sample(self, requests: list[SampleRequest]) -> list[TokensWithLogprobs]:
        """Sample ``requests`` (the :class:`~trl_envs.samplers.base.Sampler` protocol): all are submitted at once and
        decoded together; the call returns when the last one is done."""
        if not requests:
            return []
        with self.session():
            futures = [self.submit(r) for r in requests]
            return [f.result() for f in futures]

    # -- the results thread ------------------------------------------------------------------------------------

    def _collect(self, manager, stopping: threading.Event) -> None:
        """Resolve each request's future when transformers delivers its result; ends once the session stopped and
        every result was read."""
        while True:
            result = manager.get_result(timeout=POLL_S)
            if result is None:
                if stopping.is_set():
                    return
                error = manager.background_thread_status.fatal_error
                if error is not None:
                    self._fail_all(RuntimeError(f"ContinuousBatchingSampler: the generation loop failed: {error}"))
                continue
            if result.is_finished():
                self._deliver(result)

    def _deliver(self, result) -> None:
        with self._lock:
            entry = self._futures.pop(result.request_id, None)
        if entry is None:
            return
        future, request, stop = entry
        if result.error is not None:
            future.set_exception(
                RuntimeError(f"ContinuousBatchingSampler: transformers failed a request: {result.error}")
            )
            return
        tokens = list(result.generated_tokens)
        n, reason = stop.cut(tokens, request.max_tokens, self.tokenizer)
        future.set_result(TokensWithLogprobs(tokens[:n], [float(x) for x in result.logprobs[:n]], reason))

    def _fail_all(self, error: Exception) -> None:
        with self._lock:
            entries, self._futures = list(self._futures.values()), {}
        for future, _, _ in entries:
            if not future.done():
                future.set_exception(error)


__all__ = ["ContinuousBatchingSampler"]
