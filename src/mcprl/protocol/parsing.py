"""Turn one model turn into a tool call, a final answer, or neither.

Three call formats are understood (each can be switched off with `formats=`):

- ``hermes``: ``<tool_call>{"name": "get_last_quote", "arguments": {"ticker": "AAPL"}}</tool_call>``;
  the closing tag may be missing (generation stops at it or is cut), ``arguments`` may be a JSON
  string or absent (then ``{}``), and a ```` ```json ```` fence inside the tags is tolerated.
- ``json``: a bare object ``{"tool": "get_last_quote", "arguments": {...}}`` or
  ``{"name": ..., "arguments": ...}``, also inside a ```` ```json ```` fence.
- ``xml``: ``<tool><get_last_quote>{"ticker": "AAPL"}</get_last_quote></tool>``.

A final answer is ``<answer>...</answer>`` (tag configurable; a missing closing tag is tolerated).

Rules the environment relies on:

- The earliest action in the text wins: a call written before an answer is the action, and an
  answer written before a call ends the episode. Everything after that first action is ignored, so
  a turn executes at most one tool call.
- Reasoning inside ``<think>...</think>`` (Qwen3-style; an unclosed block runs to the end) is
  skipped, so a call or answer merely mentioned while thinking is not the action.
- Only the first ``MAX_INPUT_CHARS`` characters are read; every search is linear in that length
  (at most ``MAX_JSON_ATTEMPTS`` bare-JSON decodes), so adversarial text cannot blow up.
- `parse_action` never raises on any text. A recognised but broken call is ``malformed`` with a
  short reason the model can read; text without any action is ``none``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

ActionKind = Literal["tool_call", "answer", "malformed", "none"]

FORMATS: tuple[str, ...] = ("hermes", "json", "xml")
MAX_INPUT_CHARS = 65_536
MAX_JSON_DEPTH = 32
MAX_JSON_ATTEMPTS = 32
MAX_NAME_CHARS = 128

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_STOP = "</tool_call>"
XML_TOOL_START = "<tool>"
XML_TOOL_STOP = "</tool>"
# Stop strings per call style. A bare JSON call has no closing marker, so it ends with EOS.
STOP_STRINGS: dict[str, tuple[str, ...]] = {
    "hermes": (TOOL_CALL_STOP,),
    "json": (),
    "xml": (XML_TOOL_STOP,),
}

_DECODER = json.JSONDecoder()
_TAG_NAME = re.compile(r"[A-Za-z_][\w\-]{0,63}")
_XML_NAME = re.compile(r"[A-Za-z_][\w.\-]{0,%d}" % (MAX_NAME_CHARS - 1))
_HERMES_OPEN = re.compile(r"<tool_call\s*>", re.IGNORECASE)
_HERMES_CLOSE = re.compile(r"\s*</tool_call\s*>", re.IGNORECASE)
_XML_OPEN = re.compile(r"<tool\s*>\s*", re.IGNORECASE)
_XML_NAME_TAG = re.compile(r"<(%s)\s*>" % _XML_NAME.pattern)
_XML_CLOSE = re.compile(r"\s*</tool\s*>", re.IGNORECASE)
_JSON_OBJECT_START = re.compile(r'\{\s*"')
_JSON_CALL_START = re.compile(r'\{\s*"(?:tool|name|function)"\s*:')
_SPACE = re.compile(r"\s*")
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[A-Za-z]*[ \t]*\r?\n?")

HERMES_EXAMPLE = '<tool_call>{"name": "TOOL_NAME", "arguments": {...}}</tool_call>'
JSON_EXAMPLE = '{"tool": "TOOL_NAME", "arguments": {...}}'


@dataclass(frozen=True)
class ParsedAction:
    """One parsed turn. ``raw`` is the matched action's text (for ``none``: the text read, minus thinking)."""

    kind: ActionKind
    name: str | None = None
    arguments: dict[str, Any] | None = None
    answer: str | None = None
    error: str | None = None
    raw: str = ""


@dataclass(frozen=True)
class _Hit:
    start: int
    action: ParsedAction


def parse_action(
    text: str,
    *,
    answer_tag: str = "answer",
    formats: tuple[str, ...] = FORMATS,
) -> ParsedAction:
    """Parse the first action of `text`. Raises only for a bad `answer_tag` or `formats` (config)."""
    answer_open, answer_close = _answer_patterns(answer_tag)
    finders = _finders((formats,) if isinstance(formats, str) else tuple(formats))
    text = _as_text(text)[:MAX_INPUT_CHARS]
    try:
        if "<think>" in text.lower():
            text = _THINK.sub(" ", text)
        best = _find_answer(text, len(text), answer_open, answer_close)
        for find in finders:
            hit = find(text, best.start if best else len(text))
            if hit is not None and (best is None or hit.start < best.start):
                best = hit
    except Exception as exc:  # the contract is "never raise on text"; RecursionError/MemoryError too
        return ParsedAction("malformed", error=f"could not parse the action ({type(exc).__name__})", raw=text)
    return best.action if best else ParsedAction("none", raw=text)


def format_tool_call(name: str, arguments: dict[str, Any] | None = None, style: str = "hermes") -> str:
    """The canonical text of one call, exactly as the model is taught to emit it."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"tool name must be a non-empty string, got {name!r}")
    arguments = {} if arguments is None else arguments
    if not isinstance(arguments, dict):
        raise ValueError(f"tool arguments must be a dict, got {type(arguments).__name__}")
    body = json.dumps(arguments, ensure_ascii=False)
    if style == "hermes":
        quoted = json.dumps(name, ensure_ascii=False)
        return f'{TOOL_CALL_START}\n{{"name": {quoted}, "arguments": {body}}}\n{TOOL_CALL_STOP}'
    if style == "json":
        return f'{{"tool": {json.dumps(name, ensure_ascii=False)}, "arguments": {body}}}'
    if style == "xml":
        if not _XML_NAME.fullmatch(name):
            raise ValueError(f"tool name {name!r} cannot be an XML tag; use style='hermes' or 'json'")
        return f"{XML_TOOL_START}<{name}>{body}</{name}>{XML_TOOL_STOP}"
    raise ValueError(f"unknown tool-call style {style!r}; known: {', '.join(FORMATS)}")


def format_answer(answer: Any, answer_tag: str = "answer") -> str:
    """The canonical final-answer text."""
    _answer_patterns(answer_tag)
    return f"<{answer_tag}>{answer}</{answer_tag}>"


def stop_strings(style: str = "hermes", answer_tag: str = "answer") -> list[str]:
    """Stop strings for sampling: the style's closing marker plus the closing answer tag."""
    if style not in STOP_STRINGS:
        raise ValueError(f"unknown tool-call style {style!r}; known: {', '.join(FORMATS)}")
    _answer_patterns(answer_tag)
    return [*STOP_STRINGS[style], f"</{answer_tag}>"]


def canonical_json(value: Any) -> str:
    """Order-independent text of a JSON value, so identical calls compare equal."""
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):  # mixed-type keys or a cycle: not from JSON
        return repr(value)


@lru_cache(maxsize=32)
def _answer_patterns(answer_tag: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    if not isinstance(answer_tag, str) or not _TAG_NAME.fullmatch(answer_tag):
        raise ValueError(f"answer_tag must be a plain tag name like 'answer', got {answer_tag!r}")
    tag = re.escape(answer_tag)
    return re.compile(rf"<{tag}\s*>", re.IGNORECASE), re.compile(rf"</{tag}\s*>", re.IGNORECASE)


@lru_cache(maxsize=32)
def _finders(formats: tuple[str, ...]):
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"unknown tool-call format(s) {unknown}; known: {', '.join(FORMATS)}")
    table = {"hermes": _find_hermes, "json": _find_json, "xml": _find_xml}
    return tuple(table[f] for f in FORMATS if f in formats)


def _as_text(text: Any) -> str:
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        return bytes(text[:MAX_INPUT_CHARS * 4]).decode("utf-8", errors="replace")
    return "" if text is None else str(text)


def _find_answer(text: str, limit: int, open_re: re.Pattern[str], close_re: re.Pattern[str]) -> _Hit | None:
    opening = open_re.search(text, 0, limit)
    if opening is None:
        return None
    closing = close_re.search(text, opening.end())
    end = closing.start() if closing else len(text)
    raw = text[opening.start() : closing.end() if closing else len(text)]
    return _Hit(opening.start(), ParsedAction("answer", answer=text[opening.end() : end].strip(), raw=raw))


def _find_hermes(text: str, limit: int) -> _Hit | None:
    opening = _HERMES_OPEN.search(text, 0, limit)
    if opening is None:
        return None
    start, body = opening.start(), _skip_fence(text, opening.end())
    obj, end, error = _decode_at(text, body)
    if error is not None:
        closing = _HERMES_CLOSE.search(text, body)
        raw = text[start : closing.end() if closing else len(text)]
        empty = body >= len(text) or (closing is not None and closing.start() == body)
        where = "empty <tool_call>" if empty else f"{error} in <tool_call>"
        return _Hit(start, _malformed(f"{where}; expected {HERMES_EXAMPLE}", raw))
    closing = _HERMES_CLOSE.match(text, _skip_fence_end(text, end))
    raw = text[start : closing.end() if closing else end]
    return _Hit(start, _call_from_object(obj, raw))


def _find_xml(text: str, limit: int) -> _Hit | None:
    opening = _XML_OPEN.search(text, 0, limit)
    if opening is None:
        return None
    start = opening.start()
    name_tag = _XML_NAME_TAG.match(text, opening.end())
    if name_tag is None:
        closing = _XML_CLOSE.search(text, opening.end())
        raw = text[start : closing.end() if closing else len(text)]
        return _Hit(start, _malformed("expected <tool><TOOL_NAME>{json arguments}</TOOL_NAME></tool>", raw))
    name = name_tag.group(1)
    body = _skip_space(text, name_tag.end())
    close_name = re.compile(rf"\s*</{re.escape(name)}\s*>")
    empty = close_name.match(text, body) or _XML_CLOSE.match(text, body)
    if empty or body >= len(text):
        arguments, end = {}, body
    else:
        arguments, end, error = _decode_at(text, body)
        if error is not None:
            return _Hit(start, _malformed(f"{error} in <{name}> arguments", text[start:]))
    after = close_name.match(text, end)
    end = after.end() if after else end
    closing = _XML_CLOSE.match(text, end)
    raw = text[start : closing.end() if closing else end]
    return _Hit(start, _call_from_parts(name, arguments, raw))


def _find_json(text: str, limit: int) -> _Hit | None:
    attempts, skip_until = 0, 0
    for match in _JSON_OBJECT_START.finditer(text, 0, limit):
        start = match.start()
        if start < skip_until:
            continue
        if attempts >= MAX_JSON_ATTEMPTS:
            return None
        attempts += 1
        obj, end, error = _decode_at(text, start)
        if error is None:
            if isinstance(obj, dict) and _looks_like_call(obj):
                return _Hit(start, _call_from_object(obj, text[start:end]))
            skip_until = end
        elif _JSON_CALL_START.match(text, start):
            return _Hit(start, _malformed(f"{error} in tool call; expected {JSON_EXAMPLE}", text[start:]))
    return None


def _looks_like_call(obj: dict[str, Any]) -> bool:
    if "tool" in obj:
        return True
    if "name" in obj and ("arguments" in obj or "parameters" in obj):
        return True
    return isinstance(obj.get("function"), dict) and "name" in obj["function"]


def _decode_at(text: str, pos: int) -> tuple[Any, int, str | None]:
    """Decode one JSON value at `pos`: (value, end, None) or (None, pos, reason)."""
    pos = _skip_space(text, pos)
    if pos >= len(text):
        return None, pos, "missing JSON"
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        return None, pos, f"invalid JSON ({exc.msg} at char {exc.pos - pos})"
    except RecursionError:
        return None, pos, "JSON nested too deeply"
    if _depth_exceeds(value, MAX_JSON_DEPTH):
        return None, pos, f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    return value, end, None


def _depth_exceeds(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _call_from_object(obj: Any, raw: str) -> ParsedAction:
    if not isinstance(obj, dict):
        return _malformed(f"a tool call must be a JSON object, got {_json_type(obj)}; expected {HERMES_EXAMPLE}", raw)
    if "name" not in obj and "tool" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name", obj.get("tool"))
    if name is None:
        return _malformed(f"tool call is missing \"name\"; expected {HERMES_EXAMPLE}", raw)
    arguments = obj.get("arguments", obj.get("parameters"))
    return _call_from_parts(name, arguments, raw)


def _call_from_parts(name: Any, arguments: Any, raw: str) -> ParsedAction:
    if not isinstance(name, str):
        return _malformed(f"tool name must be a string, got {_json_type(name)}", raw)
    name = name.strip()
    if not name:
        return _malformed("tool name is empty", raw)
    if len(name) > MAX_NAME_CHARS:
        return _malformed(f"tool name is longer than {MAX_NAME_CHARS} characters", raw)
    if isinstance(arguments, str):
        if not arguments.strip():
            arguments = None
        else:
            arguments, _, error = _decode_at(arguments, 0)
            if error is not None:
                return _malformed(f"\"arguments\" is a string but not a JSON object: {error}", raw)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return _malformed(f"\"arguments\" must be a JSON object, got {_json_type(arguments)}", raw)
    return ParsedAction("tool_call", name=name, arguments=arguments, raw=raw)


def _malformed(error: str, raw: str) -> ParsedAction:
    return ParsedAction("malformed", error=error, raw=raw)


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _skip_space(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()


def _skip_fence(text: str, pos: int) -> int:
    pos = _skip_space(text, pos)
    fence = _FENCE.match(text, pos)
    return fence.end() if fence else pos


def _skip_fence_end(text: str, pos: int) -> int:
    after = _skip_space(text, pos)
    return after + 3 if text.startswith("```", after) else pos
