"""Typed errors of the evaluation layer; the CLI turns each into one line and exit code 1."""

from __future__ import annotations

from mcprl.errors import McprlError


class EvalError(McprlError):
    """Base class: something in an eval or run directory cannot be analysed as asked."""


class TrajectoryFormatError(EvalError):
    """A trajectories.jsonl row that does not match the documented format (docs/evaluation.md)."""


class RunDirError(EvalError):
    """A run or eval directory that is missing or holds nothing to analyse."""
