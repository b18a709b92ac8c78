"""Agent requests → token observations, with the tokenizer's chat template, token-exact across calls.

:class:`PromptBuilder` renders the messages (and ``tools``) of a chat-completions request. When a request continues
the episode's previous one — the same tools, the same earlier messages, then the assistant reply exactly as the
endpoint returned it, then new messages — the observation is the previous observation + the sampled action tokens
+ the rendered new messages only (:meth:`Renderer.extend_observation`): the reply is never re-rendered from text,
so the episode stays one token sequence. Any other request (history rewritten, tools changed, a reply edited) is
rendered whole, and the episode is marked as not extending (it trains one row per call).

Tool definitions go to the template's ``tools`` argument when the template shows them; otherwise they are
described in the system message (:func:`~trl_envs.core.tools.tools_system_prompt`) and earlier assistant tool calls
are written back as ``<tool_call>`` blocks, the format the model produces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..core.renderer import Renderer
from ..core.tools import tools_system_prompt
from .openai_format import APIError, ChatRequest, same_message


@dataclass
class Turn:
    """What the next request must start with to extend the episode: the conversation so far (canonical messages,
    the returned reply last), the tools, the observation and the sampled action."""

    messages: list[dict[str, Any]]
    tools_key: str
    observation: list[int]
    action: list[int]


class PromptBuilder:
    """Renders requests for one chat template; shared by all episodes of a renderer (caches per tool set)."""

    def __init__(self, renderer: Renderer):
        self.renderer = renderer
        self._by_tools: dict[str, tuple[Renderer, str | None]] = {}

    def _renderer_for(self, tools: list[dict[str, Any]], tools_key: str) -> tuple[Renderer, str | None]:
        """The renderer for ``tools`` and, for templates that ignore ``tools``, the system prompt describing them."""
        hit = self._by_tools.get(tools_key)
        if hit is None:
            if not tools:
                hit = (self.renderer, None)
            else:
                base = self.renderer
                tok, kwargs = base.tokenizer, base.chat_template_kwargs
                probe = [{"role": "user", "content": "Hi"}]
                plain = tok.apply_chat_template(probe, tokenize=False, add_generation_prompt=True, **kwargs)
                try:
                    shown = tok.apply_chat_template(
                        probe, tokenize=False, add_generation_prompt=True, tools=tools, **kwargs
                    )
                except Exception as e:  # noqa: BLE001 - the template is user code
                    raise APIError(
                        400, f"the chat template of {base.name!r} cannot render these tools: {e}", param="tools"
                    ) from None
                if shown != plain:
                    hit = (Renderer(tok, chat_template_kwargs={**kwargs, "tools": tools}), None)
                else:
                    hit = (base, tools_system_prompt(tools))
            if len(self._by_tools) > 256:
                self._by_tools.clear()
            self._by_tools[tools_key] = hit
        return hit

    def observe(self, request: ChatRequest, previous: Turn | None) -> tuple[list[int], bool]:
        """The observation for ``request`` and whether it extends ``previous`` token-exactly. Raises
        :class:`APIError` (400) when the template cannot render the messages."""
        tools_key = request.tools_key
        renderer, tools_prompt = self._renderer_for(request.tools, tools_key)
        msgs = request.messages
        if previous is not None and tools_key == previous.tools_key:
            n = len(previous.messages)
            if (
                len(msgs) > n
                and msgs[: n - 1] == previous.messages[: n - 1]
                and same_message(msgs[n - 1], previous.messages[n - 1])
            ):
                new = self.template_messages(msgs[n:], tools_prompt, first=False)
                return self._render(
                    lambda: renderer.extend_observation(previous.observation, previous.action, new), renderer
                ), True
        ob = self._render(
            lambda: renderer.build_generation_prompt(self.template_messages(msgs, tools_prompt)), renderer
        )
        return ob, previous is None

    @staticmethod
    def _render(fn, renderer: Renderer) -> list[int]:
        try:
            return fn()
        except APIError:
            raise
        except Exception as e:  # noqa: BLE001 - the template is user code: any failure is the request's
            raise APIError(
                400,
                f"the chat template of {renderer.name!r} cannot render these messages ({type(e).__name__}: {e})",
                param="messages",
            ) from None

    def template_messages(
        self, messages: list[dict[str, Any]], tools_prompt: str | None, first: bool = True
    ) -> list[dict[str, Any]]:
        """Canonical messages in the form the template takes (``first``: the start of a conversation, where the
        tools' system prompt goes)."""
        out = []
        for m in messages:
            msg: dict[str, Any] = {"role": m["role"], "content": m["content"]}
            calls = m.get("tool_calls")
            if calls and tools_prompt is None:
                msg["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in calls
                ]
            elif calls:
                blocks = "\n".join(
                    f"<tool_call>\n{json.dumps({'name': c['name'], 'arguments': c['arguments']})}\n</tool_call>"
                    for c in calls
                )
                msg["content"] = f"{m['content']}\n{blocks}" if m["content"] else blocks
            for key in ("tool_call_id", "name"):
                if key in m and tools_prompt is None:
                    msg[key] = m[key]
            out.append(msg)
        if first and tools_prompt is not None:
            if out and out[0]["role"] in ("system", "developer"):
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{tools_prompt}"}
            else:
                out.insert(0, {"role": "system", "content": tools_prompt})
        return out
