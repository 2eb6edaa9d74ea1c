"""Typed errors of the tool layer. `ToolManager.execute_tool` never raises them at callers:
it turns each into an `ok: false` result whose `error_type` is the class's `kind`."""

from __future__ import annotations


class ToolError(Exception):
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


class NotRecorded(ToolError):
    kind = "not_recorded"


class ConfigError(ValueError):
    """A servers config that cannot work; the message says which entry and how to fix it."""
