"""The system prompt: tool-use policy plus a compact tool list rendered from live `list_tools`.

Small models on CPU pay for every prompt token, so each tool is one line: name, typed parameters
(optional ones marked `?`), and the first sentence of its description.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Literal, Protocol

Style = Literal["hermes", "json"]


class ToolInfo(Protocol):
    """What the prompt needs of a tool (`mcprl.tools.manager.ToolInfo` has it), so the call format
    depends on no client."""

    name: str
    description: str
    input_schema: dict[str, Any]


def tool_signature(info: ToolInfo) -> str:
    props: dict[str, Any] = info.input_schema.get("properties", {})
    required = set(info.input_schema.get("required", []))
    params = ", ".join(f"{name}{'' if name in required else '?'}: {_type_name(schema)}"
                       for name, schema in props.items())
    summary = _summary(info.description)
    return f"- {info.name}({params}): {summary}" if summary else f"- {info.name}({params})"


def _summary(description: str, max_chars: int = 60) -> str:
    """The description's first clause: enough to tell tools apart, cheap in tokens."""
    text = description.strip().split("\n")[0].split(". ")[0]
    for stop in (":", " (", ";"):
        text = text.split(stop)[0]
    text = text.rstrip(".")
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    return head.rsplit(",", 1)[0] if "," in head else head.rsplit(" ", 1)[0]


def _type_name(schema: dict[str, Any]) -> str:
    if "type" in schema:
        t = schema["type"]
        if t == "array":
            return f"list[{_type_name(schema.get('items', {}))}]"
        return "|".join(t) if isinstance(t, list) else str(t)
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return "|".join(_type_name(o) for o in options if o.get("type") != "null")
    return "any"


def call_example(style: Style) -> str:
    if style == "json":
        return '{"tool": "NAME", "arguments": {...}}'
    return '<tool_call>{"name": "NAME", "arguments": {...}}</tool_call>'


def system_prompt(tools: Iterable[ToolInfo], *, style: Style = "hermes", answer_tag: str = "answer") -> str:
    lines = "\n".join(tool_signature(t) for t in tools)
    return (
        "You solve the user's task by calling tools, one call per turn, then giving the final answer.\n"
        f"Call a tool with: {call_example(style)}\n"
        f"Tool results come back in <tool_response>. When done, reply <{answer_tag}>FINAL ANSWER</{answer_tag}>.\n"
        f"Tools:\n{lines}"
    )


def tool_response(result: dict[str, Any], max_chars: int = 1500) -> str:
    """What the model sees after a call, in training data and at run time alike."""
    return f"<tool_response>\n{tool_result_text(result, max_chars)}\n</tool_response>"


def tool_result_text(result: dict[str, Any], max_chars: int = 1500) -> str:
    """A call's result (`{ok, data | error}`) as the text inside <tool_response>: what the model reads of it."""
    payload = result.get("data") if result.get("ok") else {"error": result.get("error", "unknown error")}
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"{text[:max_chars]}…[truncated]" if len(text) > max_chars else text
