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


class ServerCrashed(ToolError):
    """The server died while handling a sent call: not retried, since the call may have had effects."""

    kind = "server_error"


class ServerUnavailable(ServerCrashed):
    """The server could not be reached before the call was sent: safe to retry."""


class MalformedReply(ToolError):
    """The server answered with something that is not a JSON-RPC reply: its fault, reported at once."""

    kind = "server_error"


class NotRecorded(ToolError):
    kind = "not_recorded"

