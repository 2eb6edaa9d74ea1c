from __future__ import annotations

import pytest

from mcprl.eval.patterns import PATTERNS, label_patterns, pattern_summary
from tests.eval.scripted import (
    TASKS,
    always_correct,
    answer_turn,
    malformed_turn,
    never_tools,
    rollout,
    tool_turn,
    trajectory,
)

TASK = TASKS[0]


def test_clean_success_has_no_patterns():
    assert label_patterns(trajectory(TASK, 0, [tool_turn(), answer_turn()], True)) == []


@pytest.mark.parametrize(
    "turns,success,kwargs,expected",
    [
        ([tool_turn(ok=False, error_type="invalid_arguments"), answer_turn()], True, {}, ["tool_argument_error"]),
        ([tool_turn(tool="get_qoute", ok=False, error_type="unknown_tool"), answer_turn()], True, {}, ["unknown_tool"]),
        ([malformed_turn(), tool_turn(), answer_turn()], True, {}, ["malformed_call"]),
        ([tool_turn(ok=False, error_type="timeout"), answer_turn()], True, {}, ["timeout_or_server_error"]),
        ([tool_turn(ok=False, error_type="server_error"), answer_turn()], True, {}, ["timeout_or_server_error"]),
        ([tool_turn(), answer_turn(0.0)], False, {}, ["false_completion"]),
        ([tool_turn(), tool_turn()], False, {"stop_reason": "context_overflow"}, ["context_overflow"]),
        ([answer_turn()], True, {}, ["no_tool_used"]),
        (
            [malformed_turn(), answer_turn(0.0)],
            False,
            {},
            ["malformed_call", "false_completion", "no_tool_used"],
        ),
    ],
)
def test_each_pattern(turns, success, kwargs, expected):
    assert label_patterns(trajectory(TASK, 0, turns, success, **kwargs)) == expected


def test_tool_error_not_in_the_pattern_list_is_no_pattern():
    traj = trajectory(TASK, 0, [tool_turn(ok=False, error_type="tool_error"), answer_turn()], True)
    assert label_patterns(traj) == []


def test_length_stop_counts_as_overflow_only_at_the_context_limit():
    traj = trajectory(TASK, 0, [tool_turn(), tool_turn()], False, stop_reason="length")  # 120 + 80 tokens
    assert "context_overflow" not in label_patterns(traj)
    assert "context_overflow" not in label_patterns(traj, max_input_tokens=4096)
    assert "context_overflow" in label_patterns(traj, max_input_tokens=200)


def test_never_calling_tools_is_labelled_on_every_trajectory():
    trajs = rollout(never_tools, k=3)
    assert all("no_tool_used" in label_patterns(t) for t in trajs)
    summary = pattern_summary(trajs)
    assert summary["counts"]["no_tool_used"] == summary["n_trajectories"] == len(trajs)
    assert summary["rates"]["no_tool_used"] == 1.0
    wrong = sum(not t["success"] for t in trajs)
    assert summary["counts"]["false_completion"] == summary["failures_by_pattern"]["false_completion"] == wrong
    assert sum(summary["by_complexity"]["simple"].values()) > 0
    assert len(summary["examples"]["no_tool_used"]) == 3


def test_summary_of_clean_runs():
    summary = pattern_summary(rollout(always_correct, k=2))
    assert summary["n_clean"] == summary["n_trajectories"]
    assert set(summary["counts"]) == set(PATTERNS) and not any(summary["counts"].values())
