"""OpenEnv's wire protocol (openenv 0.10.0), spoken without importing openenv.

openenv pins `mcp<2` (through fastmcp 3) and mcprl needs `mcp>=2.3`, so the two cannot share a venv; both
of mcprl's adapters (`mcprl openenv serve` and `env_class: openenv_env`) speak the protocol themselves,
and the conformance tests run the real openenv from its own venv. One WebSocket (`/ws`) is one
session, which is one environment instance: `{"type": "reset" | "step" | "state" | "close", "data": ...}`
in, `{"type": "observation", "data": {"observation", "reward", "done"}}` (or `state`, or
`error` with a `code`) out. MCP environments take the actions `list_tools` and `call_tool`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mcprl.errors import McprlError

# openenv.core.env_server.mcp_types.ToolErrorType and types.WSErrorCode
TOOL_ERROR_TYPES = ("execution_error", "invalid_args", "transport_error", "tool_not_found", "timeout")
CAPACITY_REACHED = "CAPACITY_REACHED"
WS_ERROR_CODES = ("INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR", CAPACITY_REACHED,
                  "FACTORY_ERROR", "SESSION_ERROR")
RESERVED_TOOL_NAMES = frozenset({"reset", "step", "state", "close"})  # openenv refuses tools named so


class OpenEnvError(McprlError):
    """An OpenEnv server that cannot be reached, or that answered with an error frame (`code` says which)."""

    def __init__(self, message: str, code: str = "TRANSPORT") -> None:
        super().__init__(message)
        self.code = code


@dataclass
class StepResult:
    """One `observation` reply: the observation's own fields, its reward and done."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> StepResult:
        observation = data.get("observation") or {}
        reward = data.get("reward")
        metadata = data.get("metadata") or observation.get("metadata") or {}
        return cls(observation, None if reward is None else float(reward), bool(data.get("done")), metadata)


def ws_url(url: str) -> str:
    """`http://host:port` (an OpenEnv server's base URL, as `openenv validate --url` takes it) or a `ws://`
    URL, as the session's WebSocket URL (`.../ws`)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise OpenEnvError(f"OpenEnv URL {url!r}: use http://HOST:PORT or ws://HOST:PORT/ws", "CONFIG")
    path = parts.path.rstrip("/")
    return urlunsplit((scheme, parts.netloc, path if path.endswith("/ws") else f"{path}/ws", parts.query, ""))


def http_url(url: str) -> str:
    """The server's HTTP base URL from either form (for `/schema`, `/health`, `/mcp`)."""
    parts = urlsplit(ws_url(url))
    path = parts.path.removesuffix("/ws")
    return urlunsplit(({"ws": "http", "wss": "https"}[parts.scheme], parts.netloc, path, "", ""))


class OpenEnvSession:
    """One episode on an OpenEnv server over one WebSocket, blocking (skyrl_gym calls envs from threads).

    Every failure raises `OpenEnvError` with one line: a refused connection, a timeout, an error frame
    (its `code`, e.g. `CAPACITY_REACHED`), a reply that is not the protocol."""

    def __init__(self, url: str, *, connect_timeout_s: float = 10.0, message_timeout_s: float = 60.0,
                 headers: dict[str, str] | None = None) -> None:
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect

        self.url = ws_url(url)
        self.message_timeout_s = message_timeout_s
        try:
            # entered as a context manager (websockets >= 16 warns otherwise); `close` leaves it
            self._ws = connect(self.url, open_timeout=connect_timeout_s, max_size=None,
                               additional_headers=headers or None).__enter__()
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise OpenEnvError(f"cannot open an OpenEnv session at {self.url}: {type(exc).__name__}: {exc}") from None
        self.closed = False

    def reset(self, **kwargs: Any) -> StepResult:
        return StepResult.from_payload(self._request({"type": "reset", "data": kwargs}, "observation"))

    def step(self, action: dict[str, Any]) -> StepResult:
        return StepResult.from_payload(self._request({"type": "step", "data": action}, "observation"))

    def state(self) -> dict[str, Any]:
        return self._request({"type": "state"}, "state")

    def list_tools(self) -> list[dict[str, Any]]:
        """The tools as `{name, description, input_schema}` (either spelling of the schema key on the wire)."""
        tools = self.step({"type": "list_tools"}).observation.get("tools")
        if not isinstance(tools, list):
            raise OpenEnvError(f"{self.url}: list_tools returned no tool list; is this an MCP environment?",
                               "NOT_MCP")
        return [{"name": str(t.get("name", "")), "description": str(t.get("description") or ""),
                 "input_schema": t.get("input_schema") or t.get("inputSchema") or {}} for t in tools]

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> StepResult:
        return self.step({"type": "call_tool", "tool_name": name, "arguments": dict(arguments or {})})

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._ws.send(json.dumps({"type": "close"}))
        except Exception:  # noqa: BLE001 - a session already gone is closed
            pass
        self._ws.close()

    def __enter__(self) -> OpenEnvSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, message: dict[str, Any], expect: str) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed, WebSocketException

        if self.closed:
            raise OpenEnvError(f"{self.url}: the session is closed")
        try:
            try:
                self._ws.send(json.dumps(message, ensure_ascii=False))
            except ConnectionClosed:
                pass  # a refused session sends its error frame, then closes: read the frame
            raw = self._ws.recv(timeout=self.message_timeout_s)
        except TimeoutError:
            raise OpenEnvError(f"{self.url}: no reply to {message['type']!r} within {self.message_timeout_s:g} s",
                               "TIMEOUT") from None
        except (OSError, WebSocketException) as exc:
            self.closed = True
            raise OpenEnvError(f"{self.url}: the session ended ({type(exc).__name__}: {exc})") from None
        try:
            reply = json.loads(raw)
        except (TypeError, ValueError):
            raise OpenEnvError(f"{self.url}: a reply that is not JSON: {str(raw)[:120]!r}", "PROTOCOL") from None
        kind, data = (reply.get("type"), reply.get("data")) if isinstance(reply, dict) else (None, None)
        if kind == "error":
            data = data if isinstance(data, dict) else {}
            raise OpenEnvError(f"{self.url}: {data.get('message', 'error')} ({data.get('code', 'UNKNOWN')})",
                               str(data.get("code", "UNKNOWN")))
        if kind != expect or not isinstance(data, dict):
            raise OpenEnvError(f"{self.url}: expected a {expect!r} reply, got {str(raw)[:120]!r}", "PROTOCOL")
        return data
