""":class:`SamplerProcess`: a sampler (:class:`~trl_envs.samplers.hf.HFSampler`, or the config's ``sampler_backend``)
running in a child process, on a copy of a policy whose weights the parent updates while the child samples.

The parent (a trainer) keeps training the policy; the child generates with its own copy at the same time, on its own
CPU cores or its own share of the GPU, and without the parent's GIL. This is how rollouts overlap training
(``EnvGRPOConfig.max_staleness``; docs/async.md).

Weights: the copy's tensors live in shared memory (CPU) or are shared through CUDA IPC (GPU). Frozen parameters (a
LoRA base model's) are the policy's own tensors, shared, never copied; trainable ones are copied twice: the child's
copy and a staging buffer. :meth:`SamplerProcess.stage` writes the policy's trainable weights into the staging buffer
under a lock and bumps its version; the child loads a newer staged version into its copy before a ``generate`` call,
never during one. Each :meth:`SamplerProcess.sample` returns the version it sampled with.

Messages: the parent sends lists of :class:`~trl_envs.samplers.base.SampleRequest` through a pipe and receives the
sampled tokens and logprobs. The child ignores Ctrl-C (the parent stops it) and exits when the parent closes the pipe
or dies.

Faults: a child that dies (killed, out of memory, a crash in torch) is noticed within :data:`POLL_S` by a waiting call,
which raises :class:`SamplerProcessDied` -- a :class:`~trl_envs.errors.types.RunFailed`: the commands print its one-line
message (pid, exit, likely cause) and exit 1, without a traceback. :meth:`SamplerProcess.close` is bounded: a child
still busy :data:`STOP_GRACE_S` after being told to stop (a ``generate`` call in flight whose answer nobody needs) is
terminated, and killed if it ignores that.
"""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.multiprocessing

from ..core.types import TokensWithLogprobs
from ..errors.types import RunFailed
from .base import SampleRequest
from .choice import build_sampler

START_TIMEOUT_S = 600.0  # importing torch and transformers and receiving the weights; a loaded machine is slow
STOP_GRACE_S = 3.0  # an idle child exits at once when told to; one still generating after this is terminated
STOP_TIMEOUT_S = 10.0  # after SIGTERM (then SIGKILL)
POLL_S = 0.5  # how often a waiting parent checks that the child is alive


class SamplerProcessError(RuntimeError):
    """The sampler process failed to start, died, or raised an error it could not send back as it was."""


class SamplerProcessDied(SamplerProcessError, RunFailed):
    """The sampler process ended without answering (killed, out of memory, a crash): the run cannot go on. A
    :class:`~trl_envs.errors.types.RunFailed`, so the commands print its message and exit 1 without a traceback, and the
    rollout engine never retries it as an env error."""


@dataclass
class _ChildSetup:
    """Everything the child needs, sent once when it starts (tensors travel as shared memory, not copies)."""

    model: torch.nn.Module
    trainable_names: list[str]
    staged: list[torch.Tensor]
    tokenizer: Any
    sampling_settings: dict[str, Any]
    autocast_dtype: torch.dtype | None
    num_threads: int
    seed: int
    backend: str = "generate"
    continuous_batching_config: Any = None


class SamplerProcess:
    """An :class:`HFSampler` on a copy of ``policy``, in a child process (module docstring).

    Args:
        policy: the model being trained (unwrapped: not the DDP / DeepSpeed wrapper). Its trainable parameters are
            copied; its frozen ones are shared with the child (on CPU they are moved into shared memory in place).
        tokenizer: the policy's tokenizer (sent to the child).
        version: the version of the policy's current weights (a trainer passes its optimizer step).
        sampling_settings: keyword arguments of :class:`HFSampler` (temperature, top_p, ...).
        autocast_dtype: generate under ``torch.autocast`` with this dtype (the trainer's mixed precision), or not.
        num_threads: torch threads of the child (default: the parent's).
        seed: the child's torch seed.
        backend: the child's sampler, one of ``trl_envs.samplers.choice.SAMPLER_BACKENDS`` (``sampler_backend``).
        continuous_batching_config: with ``backend="continuous_batching"``: transformers' config (or a dict of it).

    Raises:
        SamplerProcessError: the child could not start (its error is in the message).
    """

    def __init__(
        self,
        policy: torch.nn.Module,
        tokenizer: Any,
        *,
        version: int,
        sampling_settings: dict[str, Any] | None = None,
        autocast_dtype: torch.dtype | None = None,
        num_threads: int | None = None,
        seed: int = 0,
        backend: str = "generate",
        continuous_batching_config: Any = None,
    ):
        frozen = {id(p): p for p in policy.parameters() if not p.requires_grad}
        self.model = _plain_copy(policy, frozen)  # kept alive here: CUDA IPC needs the producer's tensors
        names = [n for n, p in policy.named_parameters() if p.requires_grad]
        live, mine = dict(policy.named_parameters()), dict(self.model.named_parameters())
        self._live = [live[n] for n in names]
        for n in names:
            mine[n].requires_grad_(False)
        self._staged = [p.detach().clone() for p in self._live]
        self.num_copied_parameters = sum(p.numel() for p in self._staged)
        context = torch.multiprocessing.get_context("spawn")
        self._lock = context.Lock()  # staging buffer + version, between the parent's stage() and the child's load
        self._staged_version = context.Value("q", version, lock=False)
        self._call_lock = threading.Lock()  # one request at a time on the pipe; several rollout threads may call
        self._send_lock = threading.Lock()  # close() sends too, while a call may wait for its answer
        self._conn, child_conn = context.Pipe()
        setup = _ChildSetup(
            self.model,
            names,
            self._staged,
            tokenizer,
            dict(sampling_settings or {}),
            autocast_dtype,
            num_threads or torch.get_num_threads(),
            seed,
            backend,
            continuous_batching_config,
        )
        self.process = context.Process(
            target=_child_main,
            args=(child_conn, setup, self._lock, self._staged_version, version),
            name="trl_envs-sampler",
            daemon=True,
        )
        with _main_module_hidden():
            self.process.start()
        child_conn.close()
        try:
            self.sampler_class: str = self._receive("start", START_TIMEOUT_S)  # the child's sampler, by class name
        except BaseException:
            self.close()
            raise

    @property
    def staged_version(self) -> int:
        """The version of the newest weights staged for the child (what its next ``generate`` call will use)."""
        return int(self._staged_version.value)

    def stage(self, version: int) -> None:
        """Snapshot the policy's trainable weights as ``version``; the child loads them before its next call."""
        with self._lock, torch.no_grad():
            torch._foreach_copy_(self._staged, [p.detach() for p in self._live])
            self._staged_version.value = version

    def sample(self, requests: list[SampleRequest]) -> list[TokensWithLogprobs]:
        """Sample ``requests`` in the child (the :class:`~trl_envs.samplers.base.Sampler` protocol)."""
        return self.sample_with_version(requests)[1]

    def sample_with_version(self, requests: list[SampleRequest]) -> tuple[int, list[TokensWithLogprobs]]:
        """Sample ``requests`` in the child; return the version of the weights it sampled with, and the samples."""
        with self._call_lock:
            try:
                with self._send_lock:
                    self._conn.send(requests)
            except (BrokenPipeError, OSError) as error:
                raise self._died("sample") from error
            return self._receive("sample", None)

    def close(self) -> None:
        """Stop the child and wait for it, within bounded time; safe to call twice. An idle child exits at once; one
        still busy after :data:`STOP_GRACE_S` (a ``generate`` call in flight: its answer is not needed any more) is
        terminated, and killed :data:`STOP_TIMEOUT_S` later if it ignores that (a warning says so)."""
        with contextlib.suppress(BrokenPipeError, OSError), self._send_lock:
            self._conn.send(None)
        self.process.join(STOP_GRACE_S)
        if self.is_running():
            self.process.terminate()
            self.process.join(STOP_TIMEOUT_S)
        if self.is_running():
            self.process.kill()
            self.process.join(STOP_TIMEOUT_S)
            warnings.warn(
                f"the sampler process (pid {self.process.pid}) ignored SIGTERM for {STOP_TIMEOUT_S:.0f} s and was "
                "killed",
                RuntimeWarning,
                stacklevel=2,
            )
        self._conn.close()

    def is_running(self) -> bool:
        """Whether the child process still exists. ``Process.is_alive`` alone can keep answering ``True`` for a child
        that something else in the process reaped first (a ``waitpid(-1)`` elsewhere): its pid is then gone."""
        if not self.process.is_alive():
            return False
        try:
            os.kill(self.process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def _receive(self, what: str, timeout_s: float | None) -> Any:
        waited = 0.0
        while not self._conn.poll(POLL_S):
            waited += POLL_S
            if not self.is_running():
                raise self._died(what)
            if timeout_s is not None and waited >= timeout_s:
                raise SamplerProcessError(f"the sampler process did not answer '{what}' within {timeout_s:.0f} s")
        try:
            status, payload = self._conn.recv()
        except (EOFError, OSError) as error:
            raise self._died(what) from error
        if status == "error":
            pickled, text = payload
            if pickled is not None:
                # the child's own exception, as it was; its traceback (in the child) as the cause
                raise pickle.loads(pickled) from SamplerProcessError(f"in the sampler process:\n{text}")
            raise SamplerProcessError(f"the sampler process failed at '{what}':\n{text}")
        return payload

    def _died(self, what: str = "sample") -> SamplerProcessError:
        self.process.join(1.0)
        code = self.process.exitcode
        if what == "start":
            return SamplerProcessError(
                f"the sampler process (pid {self.process.pid}) died at 'start': it {describe_exit(code)}. Likely "
                "causes: a class of the model or tokenizer that the child cannot import (one defined in the training "
                "script itself: move it to a module), or no memory left"
            )
        return SamplerProcessDied(
            f"the sampler process (pid {self.process.pid}, which generates the rollouts with max_staleness >= 1) "
            f"{describe_exit(code)} while {'sampling' if what == 'sample' else repr(what)}; the run cannot go on. "
            "Resume from the last "
            "checkpoint (resume_from_checkpoint last), or set max_staleness 0 to generate in the training process."
        )


def describe_exit(code: int | None) -> str:
    """How a child process ended, for a message: its signal or status and the likely cause."""
    if code is None:
        return "stopped answering (its pipe closed while it still runs)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        cause = {
            "SIGKILL": "sent by another process, or by the kernel when memory ran out (see `dmesg`)",
            "SIGTERM": "sent by another process",
            "SIGSEGV": "a crash in native code (torch, a CUDA driver)",
            "SIGBUS": "a crash in native code, or shared memory (/dev/shm) ran out",
            "SIGABRT": "a crash in native code (torch, a CUDA driver)",
        }.get(name, "sent by another process or the system")
        return f"was killed by {name} (exit code {code}: {cause})"
    return f"exited with status {code} (anything it printed is in the output above)"


_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_backward_hooks",
    "_backward_pre_hooks",
)


def _plain_copy(policy: torch.nn.Module, frozen: dict[int, torch.nn.Parameter]) -> torch.nn.Module:
    """A copy of ``policy`` for sampling, in eval mode, sharing its ``frozen`` parameters: without the module hooks and
    instance-level ``forward`` overrides that training wrappers add (DeepSpeed's, TRL's fused LM head), which serve
    the training forward only and are closures the child could not receive."""
    model = copy.deepcopy(policy, memo=dict(frozen))
    for module in model.modules():
        for name in _HOOK_DICTS:
            hooks = module.__dict__.get(name)
            if hooks is not None:
                hooks.clear()
        module.__dict__.pop("forward", None)
    return model.eval()


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start a ``spawn`` child without re-running the parent's ``__main__``: multiprocessing would import the training
    script again in the child (its top level runs again where it has no ``if __name__ == "__main__"`` guard). The
    child needs nothing from it."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {key: main.__dict__[key] for key in ("__file__", "__spec__") if key in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def _child_main(conn, setup: _ChildSetup, lock, staged_version, version: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group; the parent stops us
    try:
        torch.set_num_threads(setup.num_threads)
        torch.manual_seed(setup.seed)
        model = setup.model
        params = dict(model.named_parameters())
        mine = [params[n] for n in setup.trainable_names]
        device = next(model.parameters()).device
        if device.type == "cuda":
            torch.cuda.set_device(device)

        @contextlib.contextmanager
        def generation_model():
            if setup.autocast_dtype is None:
                yield model
            else:
                with torch.autocast(device.type, dtype=setup.autocast_dtype):
                    yield model

        sampler = build_sampler(
            setup.backend,
            model,
            setup.tokenizer,
            model_context=generation_model,
            continuous_batching_config=setup.continuous_batching_config,
            keep_running=True,  # the copy never trains: one continuous-batching session for the child's life
            **setup.sampling_settings,
        )
    except BaseException as error:  # noqa: BLE001 - sent to the parent
        _send_error(conn, error)
        return
    conn.send(("ok", type(sampler).__name__))
    try:
        _serve(conn, setup, sampler, mine, lock, staged_version, version)
    finally:
        close = getattr(sampler, "close", None)  # a continuous-batching loop is a thread that must end first
        if close is not None:
            close()


def _serve(conn, setup: _ChildSetup, sampler, mine, lock, staged_version, version: int) -> None:
    while True:
        try:
            requests = conn.recv()
        except (EOFError, OSError):  # the parent closed the pipe or died
            return
        if requests is None:
            return
        try:
            with lock:
                if staged_version.value != version:
                    with torch.no_grad():
                        torch._foreach_copy_(mine, setup.staged)
                    version = int(staged_version.value)
            results = sampler.sample(requests)
        except BaseException as error:  # noqa: BLE001 - sent to the parent, which raises it
            _send_error(conn, error)
            continue
        conn.send(("ok", (version, results)))


def _send_error(conn, error: BaseException) -> None:
    """Send ``error`` itself where it survives pickling (the parent raises it as it was), else its traceback text."""
    text = "".join(traceback.format_exception(error))
    try:
        pickled = pickle.dumps(error)
        pickle.loads(pickled)
    except Exception:  # noqa: BLE001 - an exception type that does not round-trip
        pickled = None
    conn.send(("error", (pickled, text)))


__all__ = ["SamplerProcess", "SamplerProcessDied", "SamplerProcessError", "describe_exit"]
