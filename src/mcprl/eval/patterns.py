"""Error patterns of a trajectory: why an agent failed (or got lucky), as countable labels."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from mcprl.eval.trajectory import Trajectory, TrajectoryLike, as_trajectories, sort_groups

PATTERNS = (
    "tool_argument_error",
    "unknown_tool",
    "malformed_call",
    "timeout_or_server_error",
    "false_completion",
    "context_overflow",
    "no_tool_used",
)
PATTERN_HELP = {
    "tool_argument_error": "a tool call was rejected for invalid arguments",
    "unknown_tool": "the agent called a tool that does not exist",
    "malformed_call": "a turn could not be parsed as a tool call or answer",
    "timeout_or_server_error": "a tool timed out or its server failed",
    "false_completion": "the agent answered, and the answer was wrong",
    "context_overflow": "the episode ran out of context",
    "no_tool_used": "the agent never called a tool",
}
_ERROR_TYPE_PATTERN = {
    "invalid_arguments": "tool_argument_error",
    "unknown_tool": "unknown_tool",
    "timeout": "timeout_or_server_error",
    "server_error": "timeout_or_server_error",
}
EXAMPLES_PER_PATTERN = 3


def label_patterns(traj: TrajectoryLike, *, max_input_tokens: int | None = None) -> list[str]:
    """The patterns of one trajectory, in `PATTERNS` order; [] for a clean run."""
    (t,) = as_trajectories([traj])
    found = set()
    for turn in t.turns:
        if turn.kind == "malformed":
            found.add("malformed_call")
        if turn.result is not None and not turn.result.ok and turn.result.error_type in _ERROR_TYPE_PATTERN:
            found.add(_ERROR_TYPE_PATTERN[turn.result.error_type])
    if t.answered and (t.answer_correct is False or (t.answer_correct is None and not t.success)):
        found.add("false_completion")
    if t.overflowed(max_input_tokens):
        found.add("context_overflow")
    if not t.tool_calls:
        found.add("no_tool_used")
    return [p for p in PATTERNS if p in found]


def pattern_summary(trajectories: Iterable[TrajectoryLike], *, max_input_tokens: int | None = None) -> dict[str, Any]:
    """Counts and rates of each pattern, overall and by complexity, plus a few example task ids."""
    trajs = as_trajectories(trajectories)
    labels = [label_patterns(t, max_input_tokens=max_input_tokens) for t in trajs]
    examples: dict[str, list[str]] = defaultdict(list)
    for t, ls in zip(trajs, labels, strict=True):
        for p in ls:
            if len(examples[p]) < EXAMPLES_PER_PATTERN and t.task_id not in examples[p]:
                examples[p].append(t.task_id)
    return {
        "n_trajectories": len(trajs),
        "n_clean": sum(not ls for ls in labels),
        "counts": _counts(labels),
        "rates": _rates(labels),
        "by_complexity": _breakdown(trajs, labels, lambda t: t.complexity),
        "by_data_source": _breakdown(trajs, labels, lambda t: t.data_source),
        "failures_by_pattern": _counts([ls for t, ls in zip(trajs, labels, strict=True) if not t.success]),
        "examples": dict(examples),
    }


def _counts(labels: Sequence[list[str]]) -> dict[str, int]:
    counter = Counter(p for ls in labels for p in ls)
    return {p: counter[p] for p in PATTERNS}


def _rates(labels: Sequence[list[str]]) -> dict[str, float | None]:
    counts = _counts(labels)
    return {p: (counts[p] / len(labels) if labels else None) for p in PATTERNS}


def _breakdown(trajs: Sequence[Trajectory], labels: Sequence[list[str]], key) -> dict[str, dict[str, int]]:
    groups: dict[str, list[list[str]]] = defaultdict(list)
    for t, ls in zip(trajs, labels, strict=True):
        groups[key(t)].append(ls)
    return {g: _counts(groups[g]) for g in sort_groups(groups)}
