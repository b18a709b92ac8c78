"""The OpenAI chat-completions wire format, as the agent endpoint speaks it: reading a request, writing a reply.

Plain functions over JSON-like dicts (no server code), so that what the endpoint accepts and answers is testable
without HTTP.

* :func:`parse_request` checks a request body and returns a :class:`ChatRequest`, or raises :class:`APIError`
  (an HTTP status and an OpenAI-style error body naming the field at fault).
* :func:`canonical_messages` puts messages into one comparable form (text parts joined, ``None`` content as
  ``""``, tool-call arguments as dicts): what the endpoint compares to decide whether a request continues the
  episode's conversation.
* :func:`assistant_reply` turns a sampled reply into the assistant message returned (``content`` and
  ``tool_calls`` parsed from the ``<tool_call>`` blocks of :mod:`trl_envs.core.tools`).
* :func:`completion_body` / :func:`stream_body` write the response (one JSON object, or server-sent events).
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from ..core.tools import parse_tool_calls

_ROLES = ("system", "developer", "user", "assistant", "tool")
_TOOL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.S)


class APIError(Exception):
    """A request the endpoint refuses: ``status`` (HTTP) and an OpenAI-style ``{"error": {...}}`` body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    """A checked chat-completions request.

    Attributes:
        messages: the conversation, in :func:`canonical_messages` form.
        tools: the ``tools`` list as sent (OpenAI function schemas), ``[]`` when none.
        max_tokens: ``max_completion_tokens`` or ``max_tokens`` from the request (``None``: not given).
        stream: whether the reply goes back as server-sent events.
        include_usage: ``stream_options.include_usage``.
        model: the ``model`` field, echoed in the reply.
        tools_key: :func:`tools_key` of ``tools`` (computed once per request: the prompt builder compares it).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_tokens: int | None = None
    stream: bool = False
    include_usage: bool = False
    model: str = "policy"
    tools_key: str = "[]"


def tools_key(tools: list[dict[str, Any]]) -> str:
    """A canonical string of a ``tools`` list (keys sorted): equal for equal tool sets."""
    orjson = _orjson()
    if orjson is not None:
        try:
            return orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode()
        except TypeError:  # a value orjson does not take (an int beyond 64 bits): the stdlib's form
            pass
    return json.dumps(tools, sort_keys=True, separators=(",", ":"))


_ORJSON: list = []


def _orjson():
    """The ``orjson`` module (faster JSON) if installed, else ``None``; imported on first use."""
    if not _ORJSON:
        try:
            import orjson
        except ImportError:  # pragma: no cover - depends on the environment
            orjson = None
        _ORJSON.append(orjson)
    return _ORJSON[0]


def loads(data: bytes | bytearray) -> Any:
    """Parse a JSON request body (``ValueError`` when it is not JSON)."""
    orjson = _orjson()
    return orjson.loads(data) if orjson is not None else json.loads(data)


def dumps(value: Any) -> bytes:
    """A response body: compact JSON bytes."""
    orjson = _orjson()
    if orjson is not None:
        try:
            return orjson.dumps(value)
        except TypeError:  # a value orjson does not take: the stdlib's form
            pass
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def parse_request(body: Any) -> ChatRequest:
    """Check a chat-completions request body; raise :class:`APIError` (400) naming the first bad field."""
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    n = body.get("n", 1)
    if n not in (1, None):
        raise APIError(
            400,
            f"n={n!r} is not supported: each call is one turn of one episode, so n must be 1 (GRPO "
            "samples a group as separate episodes; make separate calls for more samples)",
            param="n",
        )
    if body.get("stop") not in (None, [], ""):
        raise APIError(
            400,
            "stop sequences are not supported: the chat template's end-of-turn token ends every reply",
            param="stop",
        )
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise APIError(400, f"max_tokens must be an integer >= 1, got {max_tokens!r}", param="max_tokens")
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        raise APIError(
            400, 'tools must be a list of {"type": "function", "function": {"name": ..., ...}} objects', param="tools"
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise APIError(400, f"stream must be true or false, got {stream!r}", param="stream")
    options = body.get("stream_options") or {}
    model = body.get("model", "policy")
    return ChatRequest(
        canonical_messages(body.get("messages")),
        tools,
        max_tokens,
        stream,
        bool(isinstance(options, dict) and options.get("include_usage")),
        model if isinstance(model, str) else "policy",
        tools_key(tools),
    )


def canonical_messages(messages: Any) -> list[dict[str, Any]]:
    """Messages in one comparable form: ``role``, ``content`` (a string: text parts joined, ``None`` → ``""``),
    and where present ``tool_calls`` (``[{"id", "name", "arguments": dict}]``), ``tool_call_id``, ``name``.
    Raises :class:`APIError` (400) naming the message at fault."""
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "messages must be a non-empty list", param="messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise APIError(400, f"{where} must be an object with a role among {', '.join(_ROLES)}", param=where)
        msg: dict[str, Any] = {"role": m["role"], "content": _text(m.get("content"), where)}
        calls = m.get("tool_calls")
        if calls:
            if m["role"] != "assistant" or not isinstance(calls, list):
                raise APIError(
                    400,
                    f"{where}.tool_calls: only assistant messages carry a list of tool calls",
                    param=f"{where}.tool_calls",
                )
            msg["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
        for key in ("tool_call_id", "name"):
            if isinstance(m.get(key), str):
                msg[key] = m[key]
        out.append(msg)
    return out


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    raise APIError(
        400,
        f"{where}.content must be a string or a list of text parts (images and audio are not supported)",
        param=f"{where}.content",
    )


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise APIError(
            400, f'{where} must be {{"id", "type": "function", "function": {{"name", "arguments"}}}}', param=where
        )
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            raise APIError(400, f"{where}.function.arguments is not valid JSON", param=where) from None
    return {"id": call.get("id") if isinstance(call.get("id"), str) else "", "name": fn["name"], "arguments": args}


def same_message(sent: dict[str, Any], returned: dict[str, Any]) -> bool:
    """Whether an assistant message the agent sent back is the one the endpoint returned (canonical forms; ids and
    fields the template does not see are ignored)."""
    if sent["role"] != "assistant" or sent["content"] != returned["content"]:
        return False
    calls = [(c["name"], c["arguments"]) for c in sent.get("tool_calls", [])]
    return calls == [(c["name"], c["arguments"]) for c in returned.get("tool_calls", [])]


def assistant_reply(text: str) -> dict[str, Any]:
    """The assistant message (canonical form) for the decoded reply ``text``.

    Well-formed ``<tool_call>`` blocks become ``tool_calls`` and leave the content; if any block is malformed the
    whole text stays content and no call is returned (as vLLM's Hermes parser does), so the agent sees what the
    model wrote.
    """
    calls = parse_tool_calls(text)
    if not calls or any(c.error is not None for c in calls):
        return {"role": "assistant", "content": text}
    content = _TOOL_BLOCK.sub("", text).strip()
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": f"call_{secrets.token_hex(8)}", "name": c.name, "arguments": c.arguments} for c in calls],
    }


def _wire_message(reply: dict[str, Any]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": reply["content"] or None}
    if reply.get("tool_calls"):
        msg["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
            }
            for c in reply["tool_calls"]
        ]
    return msg


def finish_reason(reply: dict[str, Any], sampler_finish: str) -> str:
    """OpenAI's ``finish_reason``: ``"length"`` when the token budget cut the reply, ``"tool_calls"`` when it
    calls tools, else ``"stop"``."""
    if sampler_finish == "length":
        return "length"
    return "tool_calls" if reply.get("tool_calls") else "stop"


def completion_body(
    request: ChatRequest, reply: dict[str, Any], finish: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """A ``chat.completion`` object."""
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [{"index": 0, "message": _wire_message(reply), "logprobs": None, "finish_reason": finish}],
        "usage": _usage(prompt_tokens, completion_tokens),
    }


def stream_body(
    request: ChatRequest, reply: dict[str, Any], finish: str, prompt_tokens: int, completion_tokens: int
) -> bytes:
    """The same reply as ``chat.completion.chunk`` server-sent events: one chunk with the whole message, one with
    the finish reason, one with usage if asked, then ``[DONE]``."""
    base = {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.model,
    }
    delta = _wire_message(reply)
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}]},
    ]
    if request.include_usage:
        chunks.append({**base, "choices": [], "usage": _usage(prompt_tokens, completion_tokens)})
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
