"""The chat harness verifiers environments run under here: verifiers' own ``null`` chat program, started with the
training interpreter.

verifiers runs a chat environment's agent as a program (``harnesses/utils/core.py``: an OpenAI-SDK chat loop that
sends the conversation, runs any MCP tools the model calls and stops at a text-only reply). Its ``null`` harness
prepares that program as a ``uv`` script, which needs ``uv`` and, the first time, the package index. On a local
(subprocess) runtime this harness runs the very same program text with ``sys.executable`` instead: its imports
(``openai``, ``httpx``, ``certifi``; ``mcp`` and ``tenacity`` when the env has tools) are verifiers' own
dependencies, installed with it, so no network and no ``uv`` are needed. On any other runtime (docker, prime) it is
the ``null`` harness unchanged.

verifiers finds a harness by the name of an importable module; this one registers itself as :data:`HARNESS_ID` when
imported (``trl_envs.verifiers`` imports it before it loads an environment).
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

from verifiers.v1.harnesses.null.harness import NullHarness
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE, launch_chat_program

HARNESS_ID = "trl_envs_chat"
"""The id verifiers resolves to :class:`TrainingPythonChatHarness` (``agent.harness.id``)."""

_SCRIPT = f".trl-envs-chat-{hashlib.sha256(CHAT_PROGRAM_SOURCE.encode()).hexdigest()[:16]}.py"


class _TrainingPython:
    """A runtime seen through one change: a "uv script" is written into the runtime's work dir and run with the
    training interpreter (everything else is the runtime's own)."""

    def __init__(self, runtime: Any):
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(self, script: str | bytes, env: dict | None = None, *, activate: bool = True):
        await self._runtime.write(_SCRIPT, script.encode() if isinstance(script, str) else script)
        return [sys.executable, _SCRIPT]


def _local(runtime: Any) -> bool:
    return getattr(runtime, "type", None) == "subprocess"


class TrainingPythonChatHarness(NullHarness):
    """verifiers' ``null`` chat harness; on a subprocess runtime its program runs with ``sys.executable``."""

    async def setup(self, runtime) -> None:
        if not _local(runtime):
            await super().setup(runtime)

    async def launch(
        self,
        ctx,
        trace,
        runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data,
        tool_interception_url: str | None = None,
    ):
        if not _local(runtime):
            return await super().launch(
                ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=tool_interception_url
            )
        system_prompt, prompt = self.resolve_prompt(data)
        return await launch_chat_program(
            CHAT_PROGRAM_SOURCE,
            self.config,
            ctx,
            trace,
            _TrainingPython(runtime),
            endpoint,
            secret,
            mcp_urls,
            system_prompt,
            prompt,
            extra_args=[f"--tool-interception-url={tool_interception_url}"] if tool_interception_url else (),
        )


__all__ = ["TrainingPythonChatHarness"]

sys.modules.setdefault(HARNESS_ID, sys.modules[__name__])
