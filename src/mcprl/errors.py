"""One root for every error mcprl raises on purpose, and one way to say "did you mean".

Library code raises a subclass of `McprlError` whose message is one line a person can act on (the
offending value, what would be valid); the `mcprl` command catches the root once, prints that line and
exits with the class's `exit_code` (2: bad input or config, 1: the work itself failed). Families keep
their builtin bases too (`ConfigError` is a `ValueError`), so `except ValueError` callers still work.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class McprlError(Exception):
    """Base of every typed mcprl error."""

    exit_code = 1


class ConfigError(McprlError, ValueError):
    """A configuration (training YAML, servers YAML, env settings) that cannot work; the message names
    the offending key or entry, its value and the fix."""

    exit_code = 2


def closest(value: str, options: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The options most like `value`, best first (difflib's ratio above `cutoff`)."""
    return difflib.get_close_matches(value, list(options), n=n, cutoff=cutoff)


def suggest(value: str, options: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> str:
    """"did you mean 'X'?" ("'X' or 'Y'" for n > 1) for an error message; "" when nothing is close."""
    close = closest(value, options, n=n, cutoff=cutoff)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
