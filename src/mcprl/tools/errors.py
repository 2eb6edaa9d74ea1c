"""Typed errors of the tool layer. `ToolManager.execute_tool` never raises them at callers:
it turns each into an `ok: false` result whose `error_type` is the class's `kind`."""

from __future__ import annotations

from mcprl.errors import ConfigError, McprlError

__all__ = ["ConfigError", "InvalidArguments", "NotRecorded", "ServerCrashed", "ServerUnavailable",
           "ToolError", "ToolNotFound", "ToolTimeout"]


class ToolError(McprlError):
    kind = "tool_error"


class ToolNotFound(ToolError):
    kind = "unknown_tool"


class InvalidArguments(ToolError):
    kind = "invalid_arguments"


class ToolTimeout(ToolError):
    kind = "timeout"

    @classmethod
    def after(cls, tool: str, timeout: float) -> ToolTimeout:
        return cls(f"{tool!r} did not answer within {timeout:g}s")


class ServerCrashed(ToolError):
    """The server died while handling a sent call: not retried, since the call may have had effects."""

    kind = "server_error"

    @classmethod
    def lost(cls, server: str, what: str) -> ServerCrashed:
        return cls(f"server '{server}' connection lost: {what}")


class ServerUnavailable(ServerCrashed):
    """The server could not be reached before the call was sent: safe to retry."""


class MalformedReply(ToolError):
    """The server answered with something that is not a JSON-RPC reply: its fault, reported at once."""

    kind = "server_error"

    @staticmethod
    def describe(server: str, what: str) -> str:
        """The JSON-RPC error message the connection fails the call with."""
        return f"malformed reply from server '{server}': {what[:200]}"

    @classmethod
    def of(cls, tool: str, message: str) -> MalformedReply:
        return cls(f"{tool!r}: {message}")


class NotRecorded(ToolError):
    kind = "not_recorded"

