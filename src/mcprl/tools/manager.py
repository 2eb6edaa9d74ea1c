"""ToolManager: one client for any set of MCP servers.

Discovers tools with `list_tools` (schemas come from the servers), validates arguments against them,
and executes calls with timeouts, retries of transient failures, rate limits and result truncation.
`execute_tool` never raises: every failure is an `ok: false` result with an `error_type`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jsonschema
import mcp.types as mt
from mcp.shared.exceptions import MCPError
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from mcprl.episode import episode_meta
from mcprl.errors import suggest
from mcprl.tools.config import ServersConfig, ServerSpec, load_servers_config
from mcprl.tools.connection import CONNECTION_ERRORS, ServerConnection
from mcprl.tools.faults import injected_error
from mcprl.tools.errors import (
    InvalidArguments,
    MalformedReply,
    NotRecorded,
    ServerCrashed,
    ServerUnavailable,
    ToolError,
    ToolNotFound,
    ToolTimeout,
)
from mcprl.tools.recording import Recorder, Replay

Mode = Literal["live", "record", "replay"]
# JSON-RPC codes the SDK uses for a request that timed out / a connection that went away.
_TIMEOUT_CODES = {408, -32001}
_CLOSED_MARKERS = ("connection closed", "closed resource", "broken", "end of stream")


@dataclass(frozen=True)
class ToolInfo:
    name: str  # what the model calls: `tool`, or `server.tool` when two servers share a name
    server: str
    tool: str
    description: str
    input_schema: dict[str, Any]
    validator: jsonschema.Draft202012Validator = field(repr=False, compare=False)


class _RateLimiter:
    def __init__(self, rate_per_s: float) -> None:
        self.interval = 1.0 / rate_per_s
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            now = time.monotonic()
            wait = self._next - now
            self._next = max(now, self._next) + self.interval
        if wait > 0:
            await asyncio.sleep(wait)


# A tool that takes its own time limit (`timeout_s`, as run_python does) stops itself and reports what it
# did; the client waits that long plus this, so its transport timeout never cuts the tool's own answer off.
OWN_LIMIT_GRACE_S = 5.0


def own_time_limit(schema: dict[str, Any], args: dict[str, Any]) -> float | None:
    """Seconds the tool will stop itself after: its `timeout_s` argument, else the schema's default."""
    prop = (schema.get("properties") or {}).get("timeout_s")
    if not isinstance(prop, dict):
        return None
    value = args.get("timeout_s", prop.get("default"))
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


class ToolManager:
    def __init__(self, config: ServersConfig | str | Path | None = None, *, mode: Mode = "live",
                 recording: str | Path | None = None, default_timeout: float | None = None) -> None:
        self.config = config if isinstance(config, ServersConfig) else load_servers_config(config)
        if mode != "live" and recording is None:
            raise ValueError(f"mode '{mode}' needs a recording path")
        self.mode = mode
        self.default_timeout = default_timeout
        self._recorder = Recorder(recording) if mode == "record" else None
        self._replay = Replay(recording) if mode == "replay" else None  # type: ignore[arg-type]
        self._specs = {s.name: s for s in self.config.servers}
        self._conns = {s.name: ServerConnection(s) for s in self.config.servers}
        self._limiters = {s.name: _RateLimiter(s.rate_limit_per_s) for s in self.config.servers
                          if s.rate_limit_per_s}
        self._sems: dict[str, asyncio.Semaphore] = {}
        self._tools: dict[str, ToolInfo] = {}
        self._by_server_tool: dict[tuple[str, str], ToolInfo] = {}
        self._started = False
        self._start_lock: asyncio.Lock | None = None

    async def __aenter__(self) -> ToolManager:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self, *, tolerate_failures: bool = False) -> dict[str, str]:
        """Start every server at once and index their tools; idempotent.

        Returns {server: error} for servers that failed to start; raises the first failure unless
        `tolerate_failures`, in which case the tools of the servers that did start are usable.
        """
        if self._started:
            return {}
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return {}
            failures: dict[str, str] = {}
            if self._replay is not None:
                inventory = {s.name: self._replay.tools.get(s.name, []) for s in self.config.servers}
            else:
                outcomes = await asyncio.gather(*(c.session() for c in self._conns.values()), return_exceptions=True)
                for (name, conn), outcome in zip(self._conns.items(), outcomes):
                    if isinstance(outcome, BaseException):
                        if not tolerate_failures:
                            raise outcome
                        failures[name] = str(outcome)
                inventory = {name: c.tools for name, c in self._conns.items() if name not in failures}
                if self._recorder is not None:
                    for name, tools in inventory.items():
                        self._recorder.tools(name, tools)
            self._index(inventory)
            self._sems = {s.name: asyncio.Semaphore(s.max_concurrency) for s in self.config.servers}
            self._started = True
            return failures

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._conns.values()), return_exceptions=True)
        if self._recorder is not None:
            self._recorder.close()
        self._started = False

    def tools(self) -> list[ToolInfo]:
        return list(self._tools.values())

    async def list_tools(self) -> list[ToolInfo]:
        await self.start()
        return self.tools()

    def restarts(self) -> dict[str, int]:
        return {name: c.restarts for name, c in self._conns.items()}

    async def execute_tool(self, tool_name: str, arguments: dict[str, Any] | None = None,
                           timeout: float | None = None, *, episode: str | None = None,
                           fault: str | None = None) -> dict[str, Any]:
        """Run one call. Returns {ok, data | error, error_type, latency_ms, server, tool}; never raises.

        `episode` goes to the server in the call's `_meta` (`mcprl.episode`): stateful servers keep it apart.
        `fault` (a kind of `mcprl.tools.faults`) makes this call fail as that failure really does; the result
        then also holds `injected_fault`.
        """
        t0 = time.perf_counter()
        info: ToolInfo | None = None
        injected = False  # a fault applies to a call that would have been sent
        try:
            await self.start()
            info = self.resolve(tool_name)
            args = self._validate(info, arguments)
            injected = fault is not None
            result = await self._dispatch(info, args, timeout, episode, fault)
        except ToolError as e:
            result = {"ok": False, "error": str(e), "error_type": e.kind}
        except Exception as e:  # noqa: BLE001 - a tool call must never take the caller down
            result = {"ok": False, "error": f"{type(e).__name__}: {e}", "error_type": "server_error"}
        result["latency_ms"] = round((time.perf_counter() - t0) * 1000, 3)
        if injected:
            result["injected_fault"] = fault
        if info is not None:
            result.setdefault("server", info.server)
            result.setdefault("tool", info.tool)
        return result

    def resolve(self, tool_name: str) -> ToolInfo:
        if not isinstance(tool_name, str) or not tool_name:
            raise ToolNotFound(f"tool name must be a non-empty string, got {tool_name!r}")
        info = self._tools.get(tool_name)
        if info is None and "." in tool_name:
            info = self._by_server_tool.get(tuple(tool_name.split(".", 1)))  # type: ignore[arg-type]
        if info is None:
            known = sorted(self._tools)
            hint = suggest(tool_name, known, n=3, cutoff=0.5)
            hint = f"; {hint}" if hint else ""
            raise ToolNotFound(f"unknown tool {tool_name!r}{hint} known: {', '.join(known)}")
        return info

    def _index(self, inventory: dict[str, list[mt.Tool]]) -> None:
        allowed = {s.name: s.tools for s in self.config.servers}
        exposed = {server: [t for t in tools if allowed[server] is None or t.name in allowed[server]]
                   for server, tools in inventory.items()}
        counts = Counter(t.name for tools in exposed.values() for t in tools)
        self._tools.clear()
        self._by_server_tool.clear()
        for server, tools in exposed.items():
            for t in tools:
                schema = t.input_schema or {"type": "object"}
                name = t.name if counts[t.name] == 1 else f"{server}.{t.name}"
                info = ToolInfo(name=name, server=server, tool=t.name, description=t.description or "",
                                input_schema=schema, validator=jsonschema.Draft202012Validator(schema))
                self._tools[name] = info
                self._by_server_tool[(server, t.name)] = info

    @staticmethod
    def _validate(info: ToolInfo, arguments: Any) -> dict[str, Any]:
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise InvalidArguments(f"arguments for {info.name!r} must be a JSON object, got {type(arguments).__name__}")
        try:  # a lone surrogate would break the transport's stream, and every other call in flight on it
            json.dumps(arguments, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArguments(f"arguments for {info.name!r} hold text that is not valid Unicode "
                                   f"({e.object[e.start:e.end]!r} at character {e.start}); nothing was sent") from None
        if not info.validator.is_valid(arguments):
            error = jsonschema.exceptions.best_match(info.validator.iter_errors(arguments))
            where = ".".join(str(p) for p in error.absolute_path)
            prefix = f"field '{where}': " if where else ""
            props = sorted((info.input_schema.get("properties") or {}).keys())
            raise InvalidArguments(f"invalid arguments for {info.name!r}: {prefix}{error.message} "
                                   f"(parameters: {', '.join(props) or 'none'})")
        return arguments

    async def _dispatch(self, info: ToolInfo, args: dict[str, Any], timeout: float | None,
                        episode: str | None, fault: str | None = None) -> dict[str, Any]:
        spec = self._specs[info.server]
        timeout = timeout or self.default_timeout or spec.timeout_s
        own = own_time_limit(info.input_schema, args)
        if own is not None:  # the tool's own limit answers first, with its partial output
            timeout = max(timeout, own + OWN_LIMIT_GRACE_S)
        if fault is not None and fault != "truncated":
            raise injected_error(fault, info.name, info.server, info.tool, timeout)
        if self._replay is not None:
            recorded = self._replay.lookup(info.server, info.tool, args)
            if recorded is None:
                raise NotRecorded(f"no recorded result for {info.name}({json.dumps(args, sort_keys=True)})")
            return _cut_in_half(recorded) if fault == "truncated" else recorded
        limiter = self._limiters.get(info.server)
        if limiter is not None:
            await limiter.acquire()
        async with self._sems[info.server]:
            result = await self._call(spec, info, args, timeout, episode)
        if self._recorder is not None:
            self._recorder.call(info.server, info.tool, args, result)
        return _cut_in_half(result) if fault == "truncated" else result

    async def _session(self, spec: ServerSpec, conn: ServerConnection):
        """The live session; (re)starting a server is the one step that is safe to retry."""
        if conn.alive:
            return await conn.session()
        retrying = AsyncRetrying(stop=stop_after_attempt(spec.retries + 1),
                                 wait=wait_exponential(multiplier=0.1, max=2.0),
                                 retry=retry_if_exception_type(ServerUnavailable), reraise=True)
        return await retrying(conn.session)

    async def _call(self, spec: ServerSpec, info: ToolInfo, args: dict[str, Any], timeout: float,
                    episode: str | None) -> dict[str, Any]:
        conn = self._conns[info.server]
        session = await self._session(spec, conn)
        try:
            raw = await session.call_tool(info.tool, args, read_timeout_seconds=timeout, meta=episode_meta(episode))
        except (asyncio.TimeoutError, TimeoutError) as e:
            raise ToolTimeout.after(info.name, timeout) from e
        except MCPError as e:
            if e.code == mt.PARSE_ERROR:
                raise MalformedReply.of(info.name, e.message) from e
            if e.code in _TIMEOUT_CODES or "timed out" in e.message.lower():
                raise ToolTimeout.after(info.name, timeout) from e
            if any(m in e.message.lower() for m in _CLOSED_MARKERS):
                conn.mark_dead()
                raise ServerCrashed.lost(info.server, e.message) from e
            raise ToolError(f"{info.name!r} failed: {e.message}") from e
        except CONNECTION_ERRORS as e:
            conn.mark_dead()
            raise ServerCrashed.lost(info.server, type(e).__name__) from e
        return _to_result(raw, spec.max_result_chars)


def _to_result(raw: mt.CallToolResult, max_chars: int) -> dict[str, Any]:
    text = "\n".join(c.text for c in raw.content if isinstance(c, mt.TextContent))
    if raw.is_error:
        return {"ok": False, "error": _truncate(text or "tool reported an error", max_chars)[0],
                "error_type": "tool_error"}
    data: Any = raw.structured_content
    if data is None:
        data = _maybe_json(text) if text else [f"[{c.type} content]" for c in raw.content]
    elif isinstance(data, dict) and set(data) == {"result"}:
        data = data["result"]  # the SDK wraps non-object returns as {"result": ...}
    # The text block is the JSON of the structured result (SDK convention); measure it rather than re-encode.
    if len(text) <= max_chars and (raw.structured_content is None or text):
        return {"ok": True, "data": data, "truncated": False}
    encoded = json.dumps(data, ensure_ascii=False, default=str)
    if len(encoded) <= max_chars:
        return {"ok": True, "data": data, "truncated": False}
    if isinstance(data, dict) and (fitted := _fit_fields(data, max_chars)) is not None:
        return {"ok": True, "data": fitted, "truncated": True}
    return {"ok": True, "data": _truncate(data if isinstance(data, str) else encoded, max_chars)[0],
            "truncated": True}


def _fit_fields(data: dict[str, Any], max_chars: int) -> dict[str, Any] | None:
    """`data` within `max_chars` of JSON with its shape kept: its longest text fields are cut (head and tail
    kept, a marker between), so short fields such as an exit code survive. None if that is not enough."""
    fitted = dict(data)
    while (excess := len(json.dumps(fitted, ensure_ascii=False, default=str)) - max_chars) > 0:
        texts = [k for k, v in fitted.items() if isinstance(v, str) and len(v) > MIN_KEPT_CHARS]
        if not texts:
            return None
        key = max(texts, key=lambda k: len(fitted[k]))
        fitted[key] = _cut_middle(fitted[key], max(MIN_KEPT_CHARS, len(fitted[key]) - excess - 48))
    return fitted


def _cut_middle(text: str, keep: int) -> str:
    head, tail = keep * 3 // 4, keep // 4
    return f"{text[:head]}[... {len(text) - head - tail} characters truncated ...]{text[len(text) - tail:]}"


MIN_KEPT_CHARS = 64  # a text field is never cut below this


def _cut_in_half(result: dict[str, Any]) -> dict[str, Any]:
    """An injected `truncated` fault: the result as an oversized one arrives, at half its length."""
    if not result.get("ok"):
        return result
    data = result["data"]
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    return {**result, "data": _truncate(text, max(len(text) // 2, 1))[0], "truncated": True}


def _truncate(text: str, max_chars: int) -> tuple[str, bool]:
    if len(text) <= max_chars:
        return text, False
    return f"{text[:max_chars]}…[truncated {len(text) - max_chars} chars]", True


def _maybe_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
