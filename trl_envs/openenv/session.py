"""One OpenEnv server session (one WebSocket, one env instance on the server), with errors that say what went wrong.

:class:`OpenEnvSession` drives OpenEnv's own client (``openenv.core.GenericEnvClient``: actions and observations as
plain dicts, so no env-specific package is needed) on the I/O loop of :mod:`trl_envs.openenv.io_loop`, and turns its
failures into one of:

* :class:`OpenEnvConnectionError` — the server cannot be reached or the connection dropped (server down, killed,
  network: :class:`OpenEnvConnectionLost`), or a reply did not come within ``message_timeout_s``; names the URL.
  A rollout error like any other: ``RetryOnFailure`` replaces the episode by a fresh one, ``FailFast`` stops with it.
* :class:`OpenEnvCapacityError` — the server refused a new session; names its limit (``active/max``) and what to set.
* :class:`OpenEnvActionError` — the env rejected an action (invalid for its action type, or its ``step`` raised);
  names the action.

A session that cannot *open* because the server is unreachable (down, restarting) tries again, waiting
``reconnect_backoff(attempt)`` seconds between tries (exponential, from :data:`BACKOFF_FIRST_S` doubling up to
:data:`BACKOFF_MAX_S`), each wait logged as one warning line naming the URL; past ``reconnect_timeout_s`` seconds
after the first failure it raises :class:`OpenEnvServerGone`, which no error strategy retries: the run stops there,
naming the URL. An episode whose connection drops mid-episode is not reconnected (the server destroyed its env with
the connection): it fails with :class:`OpenEnvConnectionLost`, and under ``rollout_error_strategy: retry`` its
fresh replacement (which does not spend the group's ``rollout_max_retries``) is the one that waits for the server to
return.

A session is always closed: :meth:`close` is idempotent and runs even when the awaiting task was cancelled, and the
sessions still open at interpreter exit are closed then.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

from ..rollout.batching import parked
from ..rollout.engine import EnvOutageError, UnrecoverableEnvError
from . import io_loop

INSTALL = (
    "trl_envs.openenv needs OpenEnv's client. Install it (without gradio, which OpenEnv's client never "
    "imports):\n  pip install --no-deps openenv==0.10.0\n  pip install fastapi uvicorn websockets requests "
    "'fastmcp>=3,<4'"
)
"""How to install OpenEnv's client, the one dependency of this package."""

logger = logging.getLogger(__name__)
DEFAULT_MESSAGE_TIMEOUT_S = 60.0
DEFAULT_RECONNECT_TIMEOUT_S = 60.0
"""How long a session keeps trying to open against an unreachable server before :class:`OpenEnvServerGone`."""
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 8.0


def reconnect_backoff(attempt: int) -> float:
    """Seconds to wait before try ``attempt + 1`` of opening a session (``attempt`` >= 1 tries failed):
    ``BACKOFF_FIRST_S * 2 ** (attempt - 1)``, at most ``BACKOFF_MAX_S``."""
    return min(BACKOFF_FIRST_S * 2 ** (attempt - 1), BACKOFF_MAX_S)


class OpenEnvError(RuntimeError):
    """Base of the errors of an OpenEnv session."""


class OpenEnvConnectionError(OpenEnvError, ConnectionError):
    """The server at a URL cannot be reached, dropped the connection, or did not reply in time."""


class OpenEnvConnectionLost(OpenEnvConnectionError, EnvOutageError):
    """The server at a URL refused or dropped the connection (down, restarting): an outage, so under
    ``rollout_error_strategy: retry`` the episode is replayed without spending the group's retry budget."""


class OpenEnvServerGone(OpenEnvConnectionError, UnrecoverableEnvError):
    """The server at a URL stayed unreachable for a session's whole ``reconnect_timeout_s``: never retried, it stops
    the run."""


class OpenEnvCapacityError(OpenEnvError):
    """The server refused a new session: it is at its limit of concurrent sessions.

    Attributes: ``active_sessions`` and ``max_sessions`` as the server reported them (``None`` if it did not)."""

    def __init__(self, message: str, active_sessions: int | None = None, max_sessions: int | None = None):
        super().__init__(message)
        self.active_sessions, self.max_sessions = active_sessions, max_sessions


class OpenEnvActionError(OpenEnvError):
    """The env rejected an action: it does not fit the env's action type, or the env's ``step`` raised."""


_SERVER_ERROR = re.compile(r"^Server error: (?P<message>.*) \(code: (?P<code>[A-Z_.a-z]+)\)$", re.DOTALL)
_CAPACITY = re.compile(r"(\d+)/(\d+) sessions")


def _import_client():
    try:
        from openenv.core.generic_client import GenericEnvClient
        from websockets.exceptions import ConnectionClosed
    except ModuleNotFoundError as e:
        raise ImportError(f"{INSTALL}\n({e})") from e
    return GenericEnvClient, ConnectionClosed


class OpenEnvSession:
    """One session of the OpenEnv server at ``url``. Await :meth:`reset` first, then :meth:`step`; always
    :meth:`close` (an ``async with`` does).

    Args:
        url: the server's base URL (``http(s)://`` or ``ws(s)://``).
        message_timeout_s: longest wait for one reply of the server.
        connect_timeout_s: longest wait to open the connection.
        reconnect_timeout_s: how long :meth:`reset` keeps trying, with backoff, to open the session while the server
            is unreachable (``0``: fail at the first try); then :class:`OpenEnvServerGone`.
    """

    def __init__(
        self,
        url: str,
        *,
        message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S,
        connect_timeout_s: float = 10.0,
        reconnect_timeout_s: float = DEFAULT_RECONNECT_TIMEOUT_S,
    ):
        self.url = url
        self.message_timeout_s, self.connect_timeout_s = message_timeout_s, connect_timeout_s
        self.reconnect_timeout_s = reconnect_timeout_s
        self._client: Any = None
        self.closed = False

    async def __aenter__(self) -> OpenEnvSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def reset(self, **kwargs: Any) -> Any:
        """Open the session and reset its env; returns OpenEnv's ``StepResult`` (``observation`` a dict). While the
        server is unreachable, tries again with backoff for up to ``reconnect_timeout_s`` (see the module docstring).
        """
        if self.closed:
            raise OpenEnvError(f"OpenEnv session at {self.url}: reset() after close()")
        first_failure, attempt = None, 0
        while True:
            try:
                result = await self._request("reset", lambda client: client.reset(**kwargs))
                _logged_tries.pop(self.url, None)
                return result
            except OpenEnvConnectionError as e:
                if self.reconnect_timeout_s <= 0:
                    raise
                await self._drop_client()
                attempt += 1
                first_failure = first_failure if first_failure is not None else time.monotonic()
                waited = time.monotonic() - first_failure
                wait = reconnect_backoff(attempt)
                if waited + wait > self.reconnect_timeout_s:
                    raise OpenEnvServerGone(
                        f"OpenEnv server at {self.url} did not come back: {attempt} tries to open a session over "
                        f"{waited:.0f} s failed (reconnect_timeout_s={self.reconnect_timeout_s:g}); last error: {e}"
                    ) from e
                if _first_to_reach(self.url, attempt):  # one line per wait, not one per waiting episode
                    logger.warning(
                        "OpenEnv server at %s unreachable (try %d); trying again in %.1f s (gives up %g s after "
                        "the first failure)",
                        self.url,
                        attempt,
                        wait,
                        self.reconnect_timeout_s,
                    )
                async with parked():  # the batcher samples the other episodes meanwhile; no rollout clock runs
                    await asyncio.sleep(wait)
                if self.closed:
                    raise OpenEnvError(f"OpenEnv session at {self.url} was closed") from e

    async def step(self, action: dict[str, Any]) -> Any:
        """Send one action (a dict of the env's action fields); returns OpenEnv's ``StepResult``."""
        if self._client is None:
            raise OpenEnvError(f"OpenEnv session at {self.url}: step() before reset()")
        return await self._request("step", lambda client: client.step(action), action)

    async def close(self) -> None:
        """Close the connection (the server then drops the session and its env). Idempotent; finishes even when the
        caller is cancelled meanwhile (the cancellation is re-raised afterwards)."""
        self.closed = True
        client, self._client = self._client, None
        if client is None:
            return
        task = asyncio.ensure_future(io_loop.call(lambda: _close_client(client)))
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait([task])
            raise

    async def _drop_client(self) -> None:
        """Forget a client whose connection failed (closing what it holds), so the next try opens a fresh one."""
        client, self._client = self._client, None
        if client is not None:
            await io_loop.call(lambda: _close_client(client))

    async def _request(self, what: str, send: Any, action: dict[str, Any] | None = None) -> Any:
        try:
            return await io_loop.call(lambda: self._on_io_loop(send))
        except OpenEnvError:
            raise
        except Exception as e:
            raise self._translate(e, what, action) from e

    async def _on_io_loop(self, send: Any) -> Any:
        if self._client is None:
            if self.closed:
                raise OpenEnvError(f"OpenEnv session at {self.url} was closed")
            client_cls, _ = _import_client()
            client = client_cls(
                base_url=self.url, connect_timeout_s=self.connect_timeout_s, message_timeout_s=self.message_timeout_s
            )
            io_loop.track(client)
            self._client = client
            await client.connect()
        elif not _connection_open(self._client):
            # OpenEnv's client would silently open a new session here, whose env was never reset: the episode's
            # state is gone with the old one, so this is a dropped connection.
            raise ConnectionError(
                "the session's connection was closed (by the server, the network, or a timed-out "
                "request) and the server dropped its env with it"
            )
        return await send(self._client)

    def _translate(self, error: BaseException, what: str, action: dict[str, Any] | None) -> Exception:
        _, connection_closed = _import_client()
        where = f"OpenEnv server at {self.url}"
        if isinstance(error, (asyncio.TimeoutError, TimeoutError)):  # before OSError, a base class of TimeoutError
            return OpenEnvConnectionError(
                f"{where}: no reply to {what} within {self.message_timeout_s} s (message_timeout_s)"
            )
        if isinstance(error, (ConnectionError, OSError, connection_closed)):
            return OpenEnvConnectionLost(
                f"{where}: {what} failed, the connection failed or was dropped "
                f"({type(error).__name__}: {error}). Is the server running there?"
            )
        match = _SERVER_ERROR.match(str(error)) if isinstance(error, RuntimeError) else None
        if match is None:
            return OpenEnvError(f"{where}: {what} failed: {type(error).__name__}: {error}")
        message, code = match["message"], match["code"]
        if code.endswith("CAPACITY_REACHED"):
            counts = _CAPACITY.search(message)
            active, limit = (int(counts[1]), int(counts[2])) if counts else (None, None)
            limit_text = f"its limit of {limit} concurrent sessions" if limit else "its limit of concurrent sessions"
            return OpenEnvCapacityError(
                f"{where} refused a new session: it is at {limit_text} ({message}). Start it with a higher "
                "max_concurrent_envs, or set the env option max_sessions to at most that limit so episodes wait for "
                "a free session (each episode holds one session; a GRPO group of G episodes needs G).",
                active,
                limit,
            )
        if what == "step" and code.endswith(("VALIDATION_ERROR", "EXECUTION_ERROR")):
            return OpenEnvActionError(f"{where} rejected the action {action!r}: {message} (code {code})")
        return OpenEnvError(f"{where}: {what} failed: {message} (code {code})")


_logged_tries: dict[str, int] = {}  # URL -> the highest try logged in its current outage


def _first_to_reach(url: str, attempt: int) -> bool:
    """Whether ``attempt`` is a try number no session of ``url`` has logged yet in the current outage."""
    if _logged_tries.get(url, 0) >= attempt:
        return False
    _logged_tries[url] = attempt
    return True


def _connection_open(client: Any) -> bool:
    """Whether OpenEnv's client still holds its session's open WebSocket (its ``_ws``, checked against the
    ``websockets`` connection states; OpenEnv has no public accessor for it)."""
    from websockets.protocol import State

    ws = getattr(client, "_ws", None)
    return ws is not None and ws.state not in (State.CLOSING, State.CLOSED)


async def _close_client(client: Any) -> None:
    try:
        await client.close()
    except Exception as e:  # noqa: BLE001 - the connection may already be gone; nothing more to release
        logger.debug("closing an OpenEnv session failed: %s", e)
    finally:
        io_loop.untrack(client)
