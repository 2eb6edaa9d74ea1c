"""Typed errors of the domain servers.

Their messages reach the model (as `is_error=True` tool results) and people (as one CLI line),
so each names the offending value and what would be valid. They never carry a secret.
This module imports nothing heavy: the offline data raises these without loading the MCP SDK.
"""

from __future__ import annotations

from mcprl.errors import McprlError, closest


class ServiceError(McprlError):
    """A failure the caller should see verbatim: bad input, unknown entity, refused action, upstream failure."""


class InvalidArgumentError(ServiceError, ValueError):
    """An argument is malformed or out of range (bad date, limit too large, empty text)."""


class NotFoundError(ServiceError, LookupError):
    """A named entity does not exist (unknown ticker, channel, url, server name)."""


class PermissionDeniedError(ServiceError):
    """The action is not allowed on this entity (posting to an archived or read-only channel)."""


class UpstreamError(ServiceError):
    """The live API failed or refused the request (HTTP error, rate limit, bad key)."""


class MissingCredentialsError(ServiceError):
    """A live backend was requested but its API key environment variable is unset."""


def suggest(value: str, options: list[str], limit: int = 12) -> str:
    """'did you mean X? known: A, B, ...' for an error message; options are listed in the given order."""
    close = closest(value, options)
    hint = f"did you mean {close[0]!r}? " if close else ""
    shown = ", ".join(options[:limit]) + (f", ... ({len(options)} in all)" if len(options) > limit else "")
    return f"{hint}known: {shown}"
