"""How each metric is shown and which way is better; shared by the console, compare and report."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from mcprl.eval.metrics import CI_KEY

# Metric key -> (label, +1 higher is better / -1 lower is better / 0 neither, shown as a percentage).
_FIXED = {
    "success_rate": ("success rate", 1, True),
    "mean_reward": ("mean reward", 1, False),
    "answer_rate": ("answer rate", 1, True),
    "false_completion_rate": ("wrong answers (false_completion)", -1, True),
    "failed_call_rate": ("trajectories with a failed call", -1, True),
    "recovery_rate": ("solved after a failed call", 1, True),
    "answer_after_error_rate": ("made-up answer after an error", -1, True),
    "tool_call_rate": ("trajectories with a tool call", 1, True),
    "mean_tool_calls": ("tool calls / trajectory", 0, False),
    "mean_turns": ("turns / trajectory", 0, False),
    "tool_error_rate": ("tool error rate (per call)", -1, True),
    "injected_fault_rate": ("injected faults (per call)", 0, True),
    "malformed_rate": ("malformed-call rate (per turn)", -1, True),
    "context_overflow_rate": ("context-overflow rate", -1, True),
    "mean_response_tokens": ("response tokens / trajectory", 0, False),
}


def spec(key: str) -> tuple[str, int, bool]:
    if key == CI_KEY:
        return "pass@1 95% CI", 0, True
    if key.startswith(("pass@", "pass^")):
        return key, 1, True
    return _FIXED.get(key, (key, 0, False))


def metric_keys(groups: Iterable[Mapping[str, Any]]) -> list[str]:
    """The metrics present in any of `groups`, pass@k/pass^k first (by k, pass@1's interval after it),
    then the fixed order."""
    present = {k for g in groups for k in g}
    passes = sorted((k for k in present if k.startswith(("pass@", "pass^"))), key=lambda k: (k[4] == "^", int(k[5:])))
    if CI_KEY in present and "pass@1" in passes:
        passes.insert(passes.index("pass@1") + 1, CI_KEY)
    return passes + [k for k in _FIXED if k in present]


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_value(key: str, value: Any) -> str:
    if is_missing(value):
        return "—"
    if key == CI_KEY:
        return f"{value[0]:.0%}–{value[1]:.0%}"
    return f"{value:.1%}" if spec(key)[2] else f"{value:.2f}"


def fmt_delta(key: str, a: Any, b: Any) -> tuple[str, str]:
    """(text, rich style) of b - a: green when better, red when worse, dim when neutral or equal."""
    if key == CI_KEY:
        return "", "dim"
    if is_missing(a) or is_missing(b):
        return "—", "dim"
    delta = b - a
    _, direction, as_pct = spec(key)
    text = f"{delta * 100:+.1f}pp" if as_pct else f"{delta:+.2f}"
    if abs(delta) < 1e-12 or direction == 0:
        return text, "dim"
    return text, "green" if delta * direction > 0 else "red"


def pct(x: float | None) -> str:
    return "n/a" if is_missing(x) else f"{x:.0%}"


def num(x: float | None) -> str:
    return "n/a" if is_missing(x) else f"{x:.2f}"
