from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from mcprl.eval.metrics import aggregate
from mcprl.eval.results import load_results, write_eval_outputs
from mcprl.eval.signal import analyze_signal, check_tool_collapse, reward_variance_per_prompt
from tests.eval.scripted import TASKS, always_correct, answer_turn, mixed, never_tools, rollout, tool_turn, trajectory


def fails(task, i, rng):
    return [tool_turn(), answer_turn(0.0)], False


def test_variance_per_prompt():
    a, b = TASKS[0], TASKS[1]
    trajs = [trajectory(a, i, [tool_turn(), answer_turn(r)], r > 0) for i, r in enumerate([1.0, 0.0])]
    trajs += [trajectory(b, i, [tool_turn(), answer_turn(1.0)], True) for i in range(3)]
    trajs += [trajectory(TASKS[2], 0, [answer_turn()], True)]  # one sample: no group
    assert reward_variance_per_prompt(trajs) == {a["task_id"]: pytest.approx(0.25), b["task_id"]: 0.0}
    report = analyze_signal(trajs)
    assert report.n_prompts == 2 and report.frac_with_signal == 0.5 and report.warning is None


@pytest.mark.parametrize("policy,cause", [(always_correct, "too easy"), (fails, "too hard")])
def test_warning_under_a_quarter_names_the_cause(policy, cause):
    trajs = rollout(policy, k=4) + rollout(mixed, k=4, tasks=TASKS[:1], seed=3)
    report = analyze_signal(trajs)
    assert report.frac_with_signal < 0.25
    assert cause in report.warning and "want >= 25%" in report.warning


def test_no_warning_with_enough_signal():
    report = analyze_signal(rollout(mixed, k=8, seed=2))
    assert report.frac_with_signal >= 0.25 and report.warning is None


def test_collapse_alarm_trips_when_tools_are_dropped():
    reference, current = aggregate(rollout(always_correct)), aggregate(rollout(never_tools))
    alarm = check_tool_collapse(current, reference)
    assert alarm is not None and alarm.kind == "tool_collapse" and alarm.level == "error"
    assert "TOOL-USE COLLAPSE" in alarm.message and "0%" in alarm.message and "100%" in alarm.message
    assert set(alarm.details) >= {"tool_call_rate", "mean_tool_calls"}
    assert check_tool_collapse(reference["overall"], reference["overall"]) is None
    assert check_tool_collapse(reference, current) is None  # more tools than the reference is fine


def test_collapse_threshold_is_relative_to_the_reference():
    ref = {"tool_call_rate": 0.8, "mean_tool_calls": 2.0}
    assert check_tool_collapse({"tool_call_rate": 0.45, "mean_tool_calls": 1.1}, ref) is None
    alarm = check_tool_collapse({"tool_call_rate": 0.45, "mean_tool_calls": 0.9}, ref)
    assert alarm is not None and set(alarm.details) == {"min_fraction", "mean_tool_calls"}
    assert check_tool_collapse({"tool_call_rate": 0.0}, {"tool_call_rate": 0.0}) is None


def test_write_eval_outputs_says_so_loudly(tmp_path):
    write_eval_outputs(tmp_path / "eval_base", rollout(always_correct), console=Console(file=io.StringIO()))
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system="truecolor")
    results = write_eval_outputs(
        tmp_path / "eval_grpo", rollout(never_tools), reference_dir=tmp_path / "eval_base", console=console
    )
    saved = json.loads((tmp_path / "eval_grpo" / "aggregated_results.json").read_text())
    assert saved == json.loads(json.dumps(results))
    assert saved["alarms"][0]["kind"] == "tool_collapse"
    assert saved["patterns"]["counts"]["no_tool_used"] == saved["n_trajectories"]
    text = out.getvalue()
    assert re.search(r"\x1b\[1;31m[^\x1b]*ALARM: tool_collapse", text)  # bold red panel title
    lines = (tmp_path / "eval_grpo" / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == len(rollout(never_tools)) and json.loads(lines[0])["turns"][0]["kind"] == "answer"
    assert load_results(tmp_path / "eval_grpo")["alarms"] == saved["alarms"]


def test_load_results_recomputes_from_trajectories(tmp_path):
    write_eval_outputs(tmp_path, rollout(mixed), console=Console(file=io.StringIO()))
    (tmp_path / "aggregated_results.json").unlink()
    assert load_results(tmp_path)["overall"]["n_trajectories"] == len(rollout(mixed))
