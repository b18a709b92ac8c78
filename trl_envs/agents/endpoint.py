"""The rollout-time OpenAI-compatible endpoint that agent programs call.

An :class:`AgentEndpoint` is an HTTP server (a bare ASGI app served by uvicorn) on ``127.0.0.1`` at a port the OS picks,
running in the rollout's own event loop. It serves:

* ``POST /v1/chat/completions`` — the call is checked (:func:`~trl_envs.agents.openai_format.parse_request`),
  attributed to its episode by the API key (``Authorization: Bearer <key>``; an unknown key gets 401), queued on
  that episode's :class:`Session` and answered when the episode's env has sampled the reply;
* ``GET /v1/models`` — one model, the policy.

It does no sampling itself: the :class:`~trl_envs.agents.env.AgentEnv` of each episode takes the session's calls
as observations and answers them with the sampled actions, so the rollout engine batches all agents' concurrent
calls into one sampler call per turn.

:func:`acquire_endpoint` / :meth:`AgentEndpoint.release` share one endpoint per event loop between the episodes
that use it: it starts with the first and stops (socket closed, connections shut) when the last releases it.
uvicorn is imported only here (extra ``agents``); JSON goes through ``orjson`` where it is installed.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import weakref
from collections import deque
from typing import Any

from ..rollout.loop_idle import register_quiet_timer
from .openai_format import APIError, ChatRequest, dumps, loads, parse_request

logger = logging.getLogger(__name__)

_ENDED_KEYS_KEPT = 65536


def ended_error(reason: str) -> APIError:
    """The 409 answer to a call of an episode that has ended."""
    return APIError(409, f"this episode has ended ({reason}); the call was not answered", code="episode_ended")


class Call:
    """One chat-completions call waiting for its reply: the checked ``request``, and a future the env resolves with
    ``(status, body)`` (``body`` a JSON-able dict, or ``bytes`` of server-sent events)."""

    __slots__ = ("request", "reply")

    def __init__(self, request: ChatRequest, reply: asyncio.Future):
        self.request, self.reply = request, reply

    def answer(self, status: int, body: Any) -> None:
        if not self.reply.done():
            self.reply.set_result((status, body))

    def refuse(self, error: APIError) -> None:
        self.answer(error.status, error.body())


class Session:
    """The calls of one episode, in arrival order, and a way to wait for the next one (or for anything else the
    env waits on: :meth:`wake`)."""

    def __init__(self, endpoint: AgentEndpoint, key: str):
        self.endpoint, self.key = endpoint, key
        self.calls: deque[Call] = deque()
        self.num_calls = 0
        self.closed = False
        self._waiter: asyncio.Future | None = None

    def push(self, call: Call) -> None:
        self.calls.append(call)
        self.num_calls += 1
        self.wake()

    def wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self) -> None:
        """Return at the next :meth:`push` or :meth:`wake`. Check :attr:`calls` first: a call already queued does
        not wake a later wait."""
        self._waiter = asyncio.get_running_loop().create_future()
        await self._waiter

    def close(self, reason: str) -> None:
        """End the session: unanswered calls (and any later call with this key) get a 409 error naming ``reason``."""
        if self.closed:
            return
        self.closed = True
        self.endpoint._end_session(self, reason)
        error = ended_error(reason)
        while self.calls:
            self.calls.popleft().refuse(error)
        self.wake()


class AgentEndpoint:
    """An OpenAI-compatible chat-completions server for the agents of the current event loop's rollouts.

    Get one with :func:`acquire_endpoint` (shared, started on demand) rather than building it.

    Attributes:
        base_url: ``http://127.0.0.1:<port>/v1`` once started (what an ``openai`` client takes as ``base_url``).
        model_name: the model id served (``GET /v1/models``).
    """

    def __init__(self, model_name: str = "policy"):
        self.model_name = model_name
        self.base_url: str | None = None
        self._sessions: dict[str, Session] = {}
        self._ended: dict[str, str] = {}  # key -> why its episode ended, for a clear error on late calls
        self._users = 0
        self._server = None
        self._starting: asyncio.Task | None = None

    # -- lifetime ----------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind ``127.0.0.1`` on a port the OS picks and serve in the running event loop."""
        import uvicorn

        _quiet_uvicorn_logs()
        # uvicorn binds the socket itself (port 0: the OS picks): asyncio then turns Nagle's algorithm off on every
        # accepted connection, which it skips for a socket made without IPPROTO_TCP. With Nagle on, a response
        # written as headers + body waits for the client's delayed ACK (docs/DESIGN.md).
        config = uvicorn.Config(
            self._app(),
            host="127.0.0.1",
            port=0,
            log_level=None,  # set once below: at every start, each setLevel clears every logger's cache
            log_config=None,  # uvicorn's default re-runs logging.config.dictConfig at every start
            access_log=False,
            lifespan="off",
            timeout_keep_alive=60,
            proxy_headers=False,  # 127.0.0.1 only: no proxy in between; saves a middleware per call
            server_header=False,
            date_header=False,
        )
        config.load()
        # A connection's keep-alive timer only closes an idle connection (it may outlive the server by up to
        # ``timeout_keep_alive`` when the client reset the connection): not an episode's work, so the batcher's
        # quiet-loop rule (trl_envs.rollout.loop_idle) may send requests while it is pending.
        keep_alive = getattr(config.http_protocol_class, "timeout_keep_alive_handler", None)
        if keep_alive is not None:
            register_quiet_timer(keep_alive)
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup()
        self._server = server
        port = server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        """Stop accepting connections, close the open ones, and wait (at most 5 s) for calls in flight to end.

        (Not uvicorn's own ``Server.shutdown``: it sleeps a fixed time, which every rollout would pay.)"""
        server, self._server = self._server, None
        if server is None:
            return
        for session in list(self._sessions.values()):
            session.close("the endpoint stopped")
        for s in server.servers:
            s.close()
        for connection in list(server.server_state.connections):
            connection.shutdown()
        tasks = [t for t in server.server_state.tasks if not t.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5.0)
            for t in pending:
                t.cancel()
        self.base_url = None

    @property
    def running(self) -> bool:
        return self._server is not None

    async def release(self) -> None:
        """Give back one :func:`acquire_endpoint`; the last one stops the endpoint."""
        self._users -= 1
        if self._users <= 0:
            self._users = 0
            if _ENDPOINTS.get(asyncio.get_running_loop()) is self:
                del _ENDPOINTS[asyncio.get_running_loop()]
            if self._starting is not None and not self._starting.done():
                self._starting.cancel()
                await asyncio.gather(self._starting, return_exceptions=True)
            await self.stop()

    # -- sessions ----------------------------------------------------------------------------------------------

    def open_session(self) -> Session:
        """A new episode's session with its own API key (``session.key``)."""
        key = f"sk-episode-{secrets.token_urlsafe(18)}"
        session = self._sessions[key] = Session(self, key)
        return session

    def _end_session(self, session: Session, reason: str) -> None:
        self._sessions.pop(session.key, None)
        if len(self._ended) >= _ENDED_KEYS_KEPT:
            self._ended.clear()
        self._ended[session.key] = reason

    # -- HTTP --------------------------------------------------------------------------------------------------

    def _app(self):
        """The ASGI application uvicorn serves: two routes, read and answered directly (no web framework: its
        middleware stack and request objects cost more per call than the rest of the server's work)."""
        endpoint = self

        async def app(scope, receive, send):
            if scope["type"] != "http":
                return  # lifespan is off; websockets are not served
            path, method = scope["path"].rstrip("/"), scope["method"]
            try:
                session = endpoint._session_of(_authorization(scope))
                if path == "/v1/chat/completions" and method == "POST":
                    body = bytearray()
                    while True:
                        message = await receive()
                        body += message.get("body", b"")
                        if not message.get("more_body"):
                            break
                    try:
                        parsed = loads(body)
                    except ValueError:
                        raise APIError(400, "the request body is not valid JSON") from None
                    call = Call(parse_request(parsed), asyncio.get_running_loop().create_future())
                    session.push(call)
                    status, reply = await call.reply
                elif path == "/v1/models" and method == "GET":
                    status, reply = (
                        200,
                        {
                            "object": "list",
                            "data": [
                                {"id": endpoint.model_name, "object": "model", "created": 0, "owned_by": "trl_envs"}
                            ],
                        },
                    )
                else:
                    raise APIError(
                        404,
                        f"no route {method} {scope['path']}; served: POST /v1/chat/completions, GET /v1/models",
                        type="not_found_error",
                    )
            except APIError as e:
                status, reply = e.status, e.body()
            if isinstance(reply, bytes):
                content, kind = reply, b"text/event-stream"
            else:
                content, kind = dumps(reply), b"application/json"
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [(b"content-type", kind), (b"content-length", str(len(content)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": content})

        return app

    def _session_of(self, auth: str) -> Session:
        """The session whose key the ``Authorization`` header value ``auth`` carries; raises 409 for an ended
        episode's key and 401 for any other."""
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        session = self._sessions.get(key)
        if session is not None:
            return session
        if key in self._ended:
            raise ended_error(self._ended[key])
        raise APIError(
            401,
            "invalid API key: every episode has its own key (the api_key its agent was given)",
            type="authentication_error",
            code="invalid_api_key",
        )


_LOGS_SET = False


def _quiet_uvicorn_logs() -> None:
    """uvicorn's loggers at WARNING (its per-start INFO lines are noise at one start per rollout), once per process,
    and only those a user has not set."""
    global _LOGS_SET
    if not _LOGS_SET:
        _LOGS_SET = True
        for name in ("uvicorn", "uvicorn.error", "uvicorn.asgi"):
            if logging.getLogger(name).level == logging.NOTSET:
                logging.getLogger(name).setLevel(logging.WARNING)


def _authorization(scope) -> str:
    for name, value in scope["headers"]:
        if name == b"authorization":
            return value.decode("latin-1")
    return ""


_ENDPOINTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AgentEndpoint] = weakref.WeakKeyDictionary()


async def acquire_endpoint() -> AgentEndpoint:
    """The running event loop's endpoint, started if it is not; pair every call with :meth:`AgentEndpoint.release`."""
    loop = asyncio.get_running_loop()
    endpoint = _ENDPOINTS.get(loop)
    if endpoint is None:
        endpoint = _ENDPOINTS[loop] = AgentEndpoint()
        endpoint._starting = loop.create_task(endpoint.start())
    endpoint._users += 1
    try:
        await asyncio.shield(endpoint._starting)
    except BaseException:
        await endpoint.release()
        raise
    return endpoint
