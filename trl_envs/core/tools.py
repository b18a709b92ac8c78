"""Tools a model calls through the chat template's tool-call format, and the parsing of those calls.

The format is the one of Qwen / Hermes-style templates: the assistant writes each call as

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "37 * 12"}}
    </tool_call>

and the env answers each call with a ``{"role": "tool", "content": ...}`` message, which such templates render as
``<tool_response>`` blocks (and ChatML templates without tool support as a ``tool`` turn). Tool definitions go to
the template's ``tools`` argument when the template renders them (:func:`template_renders_tools`); otherwise
:func:`tools_system_prompt` describes them, in the same format, in a system message.

Parsing never raises on model output: a malformed call (bad JSON, no name, unknown tool, wrong arguments) becomes a
tool message starting with ``Error:`` that tells the model what was wrong.
"""

from __future__ import annotations

import ast
import json
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .renderer import Message, Renderer

_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.S)


@dataclass
class ToolCall:
    """One call the model wrote: ``name`` and ``arguments``, or ``error`` when it could not be read."""

    name: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def parse_tool_calls(text: str) -> list[ToolCall]:
    """The ``<tool_call>`` blocks of an assistant message, in order (empty when there are none)."""
    calls = []
    for body, closing in _CALL.findall(text):
        if not closing:
            calls.append(ToolCall(error="the tool call is not closed with </tool_call>"))
            continue
        try:
            obj = json.loads(body.strip())
        except json.JSONDecodeError as e:
            calls.append(ToolCall(error=f"the tool call is not valid JSON ({e.msg} at position {e.pos})"))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            calls.append(ToolCall(error='a tool call must be a JSON object with a "name" string and "arguments"'))
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):  # OpenAI style: arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                calls.append(ToolCall(obj["name"], error='"arguments" is a string but not valid JSON'))
                continue
        if not isinstance(args, dict):
            calls.append(ToolCall(obj["name"], error='"arguments" must be a JSON object'))
            continue
        calls.append(ToolCall(obj["name"], args))
    return calls


@dataclass
class Tool:
    """A function the model may call.

    Attributes:
        name, description: shown to the model.
        parameters: JSON schema of the arguments (an ``object`` schema).
        fn: called with the arguments as keyword arguments; returns the text of the tool message. Raising
            ``ValueError`` / ``TypeError`` / ``ArithmeticError`` gives the model an ``Error:`` message.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., str]

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema templates take in ``tools``."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def run_tool_call(call: ToolCall, tools: dict[str, Tool]) -> tuple[Message, bool]:
    """Execute ``call``; returns the tool message and whether the call succeeded."""
    name = call.name or "unknown"
    if call.error is not None:
        return _tool_message(name, f"Error: {call.error}."), False
    tool = tools.get(call.name)  # type: ignore[arg-type]
    if tool is None:
        return _tool_message(name, f"Error: unknown tool {call.name!r}; tools: {', '.join(sorted(tools))}."), False
    required = tool.parameters.get("required", [])
    allowed = tool.parameters.get("properties", {})
    missing = [k for k in required if k not in call.arguments]
    unknown = [k for k in call.arguments if k not in allowed]
    if missing or unknown:
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unknown {', '.join(unknown)}"] if unknown else []
        )
        return _tool_message(name, f"Error: bad arguments for {name} ({'; '.join(problems)})."), False
    try:
        return _tool_message(name, str(tool.fn(**call.arguments))), True
    except (ValueError, TypeError, ArithmeticError) as e:
        return _tool_message(name, f"Error: {e}"), False


def _tool_message(name: str, content: str) -> Message:
    return {"role": "tool", "name": name, "content": content}


def template_renders_tools(renderer: Renderer, tools: list[Tool]) -> bool:
    """Whether ``renderer``'s chat template shows tool definitions passed as ``tools`` (Qwen, Llama 3.1, ...)."""
    probe = [{"role": "user", "content": "Hi"}]
    kwargs = renderer.chat_template_kwargs
    plain = renderer.tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True, **kwargs)
    with_tools = renderer.tokenizer.apply_chat_template(
        probe, tokenize=False, add_generation_prompt=True, tools=[t.schema() for t in tools], **kwargs
    )
    return plain != with_tools


def renderer_with_tools(renderer: Renderer, tools: list[Tool]) -> Renderer | None:
    """A renderer whose template shows ``tools`` in every prompt, or ``None`` if the template ignores ``tools``
    (then put :func:`tools_system_prompt` in a system message)."""
    if not template_renders_tools(renderer, tools):
        return None
    kwargs = {**renderer.chat_template_kwargs, "tools": [t.schema() for t in tools]}
    return Renderer(renderer.tokenizer, chat_template_kwargs=kwargs)


def tools_system_prompt(tools: list[Tool] | list[dict[str, Any]]) -> str:
    """A system prompt describing ``tools`` (:class:`Tool` s or OpenAI function schemas) and the ``<tool_call>``
    format, for templates without tool support."""
    lines = [
        "You can call tools. To call one, write",
        "<tool_call>",
        '{"name": <tool name>, "arguments": <arguments as a JSON object>}',
        "</tool_call>",
        "Each result comes back in a tool message. When you know the answer, reply with just the answer.",
        "Tools:",
    ]
    lines += [json.dumps(t.schema()["function"] if isinstance(t, Tool) else t["function"]) for t in tools]
    return "\n".join(lines)


# -- the calculator ----------------------------------------------------------------------------------------------

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_LIMIT = 10**18


def evaluate_expression(expression: str) -> int | float:
    """The value of an arithmetic expression: numbers, ``+ - * / // % **`` and parentheses. Raises ``ValueError``
    for anything else (names, calls, huge powers) and ``ZeroDivisionError`` for a division by zero."""
    if not isinstance(expression, str) or len(expression) > 200:
        raise ValueError("expression must be a string of at most 200 characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot parse {expression!r} as arithmetic") from None

    def ev(node: ast.AST) -> int | float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 10**6):
                raise ValueError("power too large")
            value = _BINARY[type(node.op)](left, right)
            if isinstance(value, complex) or abs(value) > _LIMIT:
                raise ValueError("result out of range")
            return value
        raise ValueError(f"only numbers, + - * / // % ** and parentheses are allowed, not {type(node).__name__}")

    return ev(tree)


def format_number(value: int | float) -> str:
    """``12`` for integral values, else up to 10 significant digits."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    return str(value) if isinstance(value, int) else f"{value:.10g}"


def _calculator(expression: str) -> str:
    return format_number(evaluate_expression(expression))


CALCULATOR = Tool(
    name="calculator",
    description="Evaluate an arithmetic expression (numbers, + - * / // % ** and parentheses).",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "description": 'e.g. "37 * 12 + 5"'}},
        "required": ["expression"],
    },
    fn=_calculator,
)
"""A calculator tool: ``calculator(expression="37 * 12")`` → ``"444"``."""
