from __future__ import annotations

import io
import json
from pathlib import Path

import typer
from rich.console import Console
from typer.testing import CliRunner

from mcprl.cli.eval import app, report_command
from mcprl.eval.compare import compare_renderable, compare_table
from mcprl.eval.fmt import fmt_delta
from mcprl.eval.results import build_results, write_eval_outputs
from tests.eval.scripted import always_correct, mixed, never_tools, rollout

runner = CliRunner()


def render(renderable) -> str:
    console = Console(file=io.StringIO(), width=140, force_terminal=True, color_system="standard")
    console.print(renderable)
    return console.file.getvalue()


def test_delta_color_follows_which_way_is_better():
    assert fmt_delta("pass@1", 0.4, 0.5) == ("+10.0pp", "green")
    assert fmt_delta("tool_error_rate", 0.1, 0.2) == ("+10.0pp", "red")
    assert fmt_delta("mean_turns", 2.0, 3.0) == ("+1.00", "dim")
    assert fmt_delta("success_rate", None, 0.2) == ("—", "dim")


def test_compare_table_rows_and_colors():
    a, b = build_results(rollout(mixed)), build_results(rollout(always_correct))
    table = compare_table(a, b, "base", "grpo")
    assert [c.header for c in table.columns] == ["group", "metric", "base", "grpo", "Δ"]
    groups = [g for g in table.columns[0]._cells if g]
    assert groups == ["overall", "simple", "medium", "complex"]
    deltas = {str(m): d for m, d in zip(table.columns[1]._cells, table.columns[4]._cells, strict=True)}
    assert deltas["pass@1"].style == "green" and deltas["pass@1"].plain.startswith("+")
    text = render(table)
    assert "\x1b[32m+" in text  # green positive delta
    assert "\x1b[32m-" in text  # tool error rate went down: also green


def test_compare_raises_collapse_of_b_against_a():
    a, b = build_results(rollout(mixed)), build_results(rollout(never_tools))
    text = render(compare_renderable(a, b, "base", "grpo"))
    assert "ALARM: tool_collapse" in text and "grpo calls tools in 0%" in text


def test_cli_compare_and_summarize(tmp_path: Path):
    quiet = Console(file=io.StringIO())
    write_eval_outputs(tmp_path / "eval_base", rollout(mixed), console=quiet)
    write_eval_outputs(tmp_path / "eval_grpo", rollout(never_tools), console=quiet)

    result = runner.invoke(app, ["compare", str(tmp_path / "eval_base"), str(tmp_path / "eval_grpo")])
    assert result.exit_code == 0, result.output
    assert "eval_base vs eval_grpo" in result.output and "TOOL-USE COLLAPSE" in result.output

    aggregated = tmp_path / "eval_grpo" / "aggregated_results.json"
    aggregated.unlink()
    args = [
        "summarize",
        str(tmp_path / "eval_grpo"),
        "--reference",
        str(tmp_path / "eval_base"),
        "--k",
        "1",
        "--k",
        "2",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = json.loads(aggregated.read_text())
    assert saved["ks"] == [1, 2] and "pass^2" in saved["overall"]
    assert saved["alarms"][0]["kind"] == "tool_collapse"
    assert "pass@2" in result.output


def test_cli_errors_are_one_line(tmp_path: Path):
    result = runner.invoke(app, ["compare", str(tmp_path / "nope"), str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip().startswith("error:") and "Traceback" not in result.output
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "trajectories.jsonl").write_text('{"task_id": "t1", "turns": []}\n')
    result = runner.invoke(app, ["summarize", str(bad)])
    assert result.exit_code == 1 and "success" in result.output and len(result.output.strip().splitlines()) == 1


def test_report_command_wires_into_typer(run_dir: Path):
    cli = typer.Typer()
    cli.command()(report_command)
    result = runner.invoke(cli, [str(run_dir)])
    assert result.exit_code == 0, result.output
    assert (run_dir / "report" / "report.html").is_file() and "report.html" in result.output
    result = runner.invoke(cli, [str(run_dir / "missing")])
    assert result.exit_code == 1 and "does not exist" in result.output
