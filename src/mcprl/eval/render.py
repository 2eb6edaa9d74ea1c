"""Rich renderings of eval results for the console (and, exported as text, summary.txt)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mcprl.eval.fmt import fmt_value, metric_keys, pct, spec
from mcprl.eval.patterns import PATTERNS


def results_table(results: Mapping[str, Any], title: str = "eval") -> Table:
    """Metric rows; columns overall then each complexity."""
    groups = {"overall": results["overall"], **results.get("by_complexity", {})}
    table = Table(
        title=f"{title}: {results.get('n_tasks', '?')} tasks, {results.get('n_trajectories', '?')} trajectories"
    )
    table.add_column("metric")
    for name in groups:
        table.add_column(name, justify="right")
    for key in metric_keys(groups.values()):
        table.add_row(spec(key)[0], *(fmt_value(key, g.get(key)) for g in groups.values()))
    return table


def patterns_table(patterns: Mapping[str, Any]) -> Table:
    n = patterns.get("n_trajectories") or 0
    table = Table(title=f"error patterns ({patterns.get('n_clean', 0)}/{n} trajectories clean)")
    table.add_column("pattern")
    table.add_column("trajectories", justify="right")
    table.add_column("share", justify="right")
    table.add_column("examples")
    for p in PATTERNS:
        count = patterns["counts"].get(p, 0)
        if count:
            table.add_row(p, str(count), pct(count / n if n else None), ", ".join(patterns["examples"].get(p, [])))
    return table


def alarm_panels(alarms: Sequence[Mapping[str, Any]]) -> list[Panel]:
    """Loud: errors in red, warnings in yellow."""
    return [
        Panel(
            Text(a["message"]),
            title=Text(f"{'ALARM' if a['level'] == 'error' else 'WARNING'}: {a['kind']}", style="bold"),
            border_style="bold red" if a["level"] == "error" else "yellow",
            style="red" if a["level"] == "error" else "",
        )
        for a in alarms
    ]


def results_renderable(results: Mapping[str, Any], title: str = "eval") -> RenderableType:
    parts: list[RenderableType] = [results_table(results, title)]
    if "patterns" in results and any(results["patterns"]["counts"].values()):
        parts.append(patterns_table(results["patterns"]))
    signal = results.get("signal") or {}
    if signal.get("frac_with_signal") is not None:
        parts.append(
            Text(
                f"GRPO signal: {pct(signal['frac_with_signal'])} of {signal['n_prompts']} prompts "
                "have reward variance > 0 "
                f"({pct(signal['frac_all_success'])} always succeed, {pct(signal['frac_all_fail'])} always fail)"
            )
        )
    parts.extend(alarm_panels(results.get("alarms", [])))
    return Group(*parts)


def print_results(results: Mapping[str, Any], console: Console | None = None, title: str = "eval") -> None:
    (console or Console()).print(results_renderable(results, title))
