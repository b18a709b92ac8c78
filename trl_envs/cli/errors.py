"""How the training scripts and every ``trl-envs`` command end on a mistake or a signal: exit statuses, signals, and
the bounded exit of the process. The error types themselves are in :mod:`trl_envs.errors` (every stage raises them).

:func:`run_command` runs a command's body and turns what ends it into one short line on stderr and an exit status:

* a plain input mistake (:class:`~trl_envs.errors.types.UsageError`, and the ``ValueError`` / ``KeyError`` family
  the library raises for bad settings, unknown envs and bad rows: :func:`~trl_envs.errors.types.is_plain_error`)
  prints ``<prog>: error: <message>`` and exits 2 -- no traceback, no usage dump; messages longer than
  :data:`~trl_envs.errors.messages.MAX_MESSAGE_CHARS` are shortened. ``TRL_ENVS_TRACEBACK=1`` shows the traceback.
* a run stopped on purpose (:class:`~trl_envs.errors.types.RunFailed`: the training-health watchdog, non-finite
  rewards, a dead sampler process, a full disk while writing a checkpoint) prints its message and exits 1; so does a
  full disk met anywhere else (:func:`~trl_envs.errors.disk_full.disk_full_message`: the file and the free space of
  its disk);
* :func:`bound_exit`: once a command's work is done, the process exits within :data:`EXIT_GRACE_S` seconds even if
  something would hold it (a thread or child process the interpreter waits for at exit); a line names what was
  still running.
* Ctrl-C and ``SIGTERM`` take the same path (see :func:`termination_signals`): the rollouts in flight are cancelled,
  every env's ``cleanup()`` runs, a line says what stopped the run, and the exit status is 130 (SIGINT) or 143
  (SIGTERM). A second signal exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator

from ..errors.disk_full import disk_full_message
from ..errors.messages import shorten_message
from ..errors.types import RunFailed, is_plain_error

TRACEBACK_ENV = "TRL_ENVS_TRACEBACK"
EXIT_GRACE_S = 20.0
"""How long a finished command's process may take to exit (see :func:`bound_exit`)."""


class _Signals:
    """What :func:`termination_signals` saw: the first signal, or ``None``."""

    received: int | None = None


def received_signal() -> int | None:
    """The signal that stopped this run (``signal.SIGINT`` / ``signal.SIGTERM``), or ``None``."""
    return _Signals.received


@contextlib.contextmanager
def termination_signals() -> Iterator[None]:
    """Make ``SIGTERM`` take Ctrl-C's path; a second signal exits at once.

    The first ``SIGTERM`` is handed to the current ``SIGINT`` handler (Python's, which raises ``KeyboardInterrupt``,
    or asyncio's while a rollout runs, which cancels the rollout so every env's ``cleanup()`` runs first). A second
    ``SIGTERM`` or ``SIGINT`` after it exits at once with status ``128 + signal``. Only in the main thread; restores the
    previous handlers on exit.
    """
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _Signals.received = None
    previous_term = signal.getsignal(signal.SIGTERM)
    previous_int = signal.getsignal(signal.SIGINT)

    def on_term(signum, frame):
        if _Signals.received is not None:
            _exit_now(signum)
        _Signals.received = signum
        handler = signal.getsignal(signal.SIGINT)
        _arm_second_sigint()
        if callable(handler):  # Python's raises KeyboardInterrupt; asyncio's cancels the rollout, which then raises it
            handler(signal.SIGINT, frame)
            return
        raise KeyboardInterrupt  # SIGINT ignored or left to the OS: stop anyway

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        with contextlib.suppress(TypeError, ValueError):
            signal.signal(signal.SIGINT, previous_int)


def _arm_second_sigint() -> None:
    """After the first signal: a Ctrl-C exits at once (asyncio restores only a handler it installed itself)."""
    signal.signal(signal.SIGINT, lambda signum, frame: _exit_now(signum))


def _exit_now(signum: int) -> None:
    name = signal.Signals(signum).name
    with contextlib.suppress(Exception):
        sys.stderr.write(f"\n{name} again: exiting at once, without cleanup\n")
        sys.stderr.flush()
    os._exit(128 + signum)


STOPPED_RUN = (
    "the rollouts in flight were cancelled and their envs cleaned up; no model saved or card written after this point"
)
"""What a training run lost when stopped by a signal (the default of :func:`run_command`'s ``lost``)."""


def quiet_broken_pipe() -> int:
    """After stdout's reader went away (``trl-envs list | head``): send what is still buffered nowhere, so the
    process ends quietly like a Unix tool; returns the exit status of a process killed by ``SIGPIPE`` (141)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 128 + 13


def run_command(prog: str, body: Callable[[], int | None], lost: str = STOPPED_RUN) -> int:
    """Run ``body`` (a command's whole work, argument parsing included) and return its exit status, turning input
    mistakes, stopped runs and signals into one line on stderr (see the module docstring); ``lost`` says in that line
    what stopping the command lost. Output into a closed pipe ends the command quietly (:func:`quiet_broken_pipe`)."""
    with termination_signals():
        try:
            return body() or 0
        except BrokenPipeError:
            return quiet_broken_pipe()
        except KeyboardInterrupt:
            signum = _Signals.received or signal.SIGINT
            if _Signals.received is None:
                _Signals.received = signum
                _arm_second_sigint()
            name = signal.Signals(signum).name
            print(
                f"\n{prog}: stopped by {name} ({lost})",
                file=sys.stderr,
                flush=True,
            )
            return 128 + signum
        except SystemExit:
            raise
        except RunFailed as e:
            _report(prog, e)
            return 1
        except BaseException as e:  # noqa: BLE001 - input mistakes become one line; anything else is re-raised
            if (disk_full := disk_full_message(e)) is not None:
                _report(prog, RunFailed(disk_full))
                return 1
            if not is_plain_error(e):
                raise
            _report(prog, e)
            return 2


def bound_exit(prog: str, status: int, grace_s: float = EXIT_GRACE_S) -> None:
    """Call when ``prog``'s work is done and the process is about to exit with ``status``: if it is still alive
    ``grace_s`` seconds after its main thread ended (the interpreter waits at exit for non-daemon threads, thread
    pools and child processes), print one line naming what still runs and exit at once with ``status``.

    The clock starts only once the main thread has ended, so a process that goes on working after the command (a
    test suite that ran the script in-process, say) is never cut short."""
    import threading
    import time

    def force() -> None:
        threading.main_thread().join()  # returns once the interpreter is shutting down
        time.sleep(grace_s)
        with contextlib.suppress(Exception):
            print(f"{prog}: {_still_running(grace_s)}; exiting now (status {status})", file=sys.stderr, flush=True)
        os._exit(status)

    threading.Thread(target=force, name="trl_envs-bound-exit", daemon=True).start()


def _still_running(grace_s: float) -> str:
    import multiprocessing
    import threading

    threads = [
        t.name
        for t in threading.enumerate()
        if t is not threading.current_thread() and t is not threading.main_thread() and not t.daemon
    ]
    children = [f"{p.name} (pid {p.pid})" for p in multiprocessing.active_children()]
    held = ", ".join(
        part
        for part in (
            f"threads {', '.join(threads)}" if threads else "",
            f"child processes {', '.join(children)}" if children else "",
        )
        if part
    )
    return f"the process had not exited {grace_s:g} s after its work ended" + (
        f" (still running: {held})" if held else ""
    )


def _report(prog: str, error: BaseException) -> None:
    if os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
        traceback.print_exception(error)
    message = str(error) or type(error).__name__
    print(f"{prog}: error: {shorten_message(message)}", file=sys.stderr, flush=True)


__all__ = ["EXIT_GRACE_S", "TRACEBACK_ENV", "bound_exit", "received_signal", "run_command", "termination_signals"]
