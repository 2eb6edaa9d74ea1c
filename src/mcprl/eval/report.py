"""`mcprl report RUN_DIR`: charts, a self-contained report.html and a one-screen summary.txt.

Everything lands in RUN_DIR/report/; the page references its PNGs by relative path and loads
nothing else, so the folder can be copied or attached as is.
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from mcprl.eval.compare import paired_evals
from mcprl.eval.fmt import fmt_delta, fmt_value, metric_keys, num, pct, spec
from mcprl.eval.plots import CHARTS
from mcprl.eval.render import alarm_panels
from mcprl.eval.run import RunData, load_run
from mcprl.eval.signal import check_tool_collapse, training_signal_alarm
from mcprl.eval.trajectory import sort_groups

SUMMARY_WIDTH = 110


@dataclass(frozen=True)
class ReportPaths:
    out_dir: Path
    html: Path
    summary: Path
    images: dict[str, Path]


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    image: Path | None
    missing: str | None


def build_report(run_dir: Path, out_dir: Path | None = None, *, console: Console | None = None) -> ReportPaths:
    """Write the charts, report.html and summary.txt for a run, print the summary, return the paths."""
    run = load_run(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run.run_dir / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = _draw_charts(run, out_dir)
    alarms = run_alarms(run)
    summary = summary_renderable(run, alarms)
    summary_text = _as_text(summary)
    paths = ReportPaths(
        out_dir=out_dir,
        html=out_dir / "report.html",
        summary=out_dir / "summary.txt",
        images={s.key: s.image for s in sections if s.image is not None},
    )
    paths.summary.write_text(summary_text)
    paths.html.write_text(render_html(run, sections, alarms))
    console = console or Console()
    console.print(summary)
    console.print(f"report: {paths.html}", soft_wrap=True)
    return paths


def run_alarms(run: RunData) -> list[dict[str, Any]]:
    """The evals' own alarms, tool collapse of each eval against the base, and low GRPO signal in training."""
    alarms = [dict(a, source=f"eval {name}") for name, r in run.evals.items() for a in r.get("alarms", [])]
    if run.evals:
        ref = "base" if "base" in run.evals else next(iter(run.evals))
        for name, r in run.evals.items():
            if name == ref or any(a["kind"] == "tool_collapse" for a in r.get("alarms", [])):
                continue
            alarm = check_tool_collapse(r, run.evals[ref], current_name=f"eval {name}", reference_name=f"eval {ref}")
            if alarm is not None:
                alarms.insert(0, dict(alarm.to_dict(), source=f"eval {name} vs {ref}"))
    grpo = run.grpo
    if "frac_prompts_with_signal" in grpo and grpo["frac_prompts_with_signal"].notna().any():
        tail = grpo.dropna(subset=["frac_prompts_with_signal"]).tail(max(1, len(grpo) // 4))
        success = tail["success_rate"].mean() if "success_rate" in tail else None
        alarm = training_signal_alarm(
            float(tail["frac_prompts_with_signal"].mean()), None if pd.isna(success) else float(success), len(tail)
        )
        if alarm is not None:
            alarms.append(dict(alarm.to_dict(), source="training"))
    return alarms


def training_facts(run: RunData) -> list[tuple[str, str]]:
    """(phase, one-line summary) rows; curves summarised as start → end (means of the first and last tenth)."""
    sft, grpo = run.sft, run.grpo
    facts = []
    if len(sft):
        facts.append(("SFT", f"{len(sft)} steps, loss {_start_end(sft, 'sft_loss', num)}"))
    if len(grpo):
        facts.append(
            (
                "GRPO",
                f"{len(grpo)} steps, reward {_start_end(grpo, 'reward_mean', num)}, "
                f"success {_start_end(grpo, 'success_rate', pct)}, "
                f"prompts with signal {_start_end(grpo, 'frac_prompts_with_signal', pct)}",
            )
        )
    else:
        facts.append(("GRPO", "no steps"))
    seconds = run.summary.get("train_seconds")
    if isinstance(seconds, int | float):
        facts.append(("time", f"{seconds / 60:.1f} min"))
    return facts


def eval_rows(evals: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[list[str]], list[str]]:
    """Header, rows (label, value per eval, delta last - first) and the delta styles for the eval table:
    every overall metric, then pass@1 per complexity."""
    names = list(evals)
    header = ["metric", *names] + ([f"Δ {names[-1]} - {names[0]}"] if len(names) > 1 else [])
    overall = [r["overall"] for r in evals.values()]
    lines = [(spec(key)[0], key, [o.get(key) for o in overall]) for key in metric_keys(overall)]
    by_cx = [r.get("by_complexity", {}) for r in evals.values()]
    for group in sort_groups({g for cx in by_cx for g in cx}):
        lines.append((f"pass@1, {group}", "pass@1", [cx.get(group, {}).get("pass@1") for cx in by_cx]))
    rows, styles = [], []
    for label, key, values in lines:
        row = [label, *(fmt_value(key, v) for v in values)]
        style = ""
        if len(names) > 1:
            delta, style = fmt_delta(key, values[0], values[-1])
            row.append(delta)
        rows.append(row)
        styles.append(style)
    return header, rows, styles


def paired_lines(evals: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per consecutive pair of evals: tasks better and worse, and the sign test's p-value."""
    names, tests = list(evals), paired_evals(evals)
    return [tests[f"{b}_vs_{a}"].describe(a, b) for a, b in zip(names, names[1:]) if f"{b}_vs_{a}" in tests]


def summary_renderable(run: RunData, alarms: Sequence[Mapping[str, Any]]) -> RenderableType:
    parts: list[RenderableType] = [
        Text(f"mcprl run report: {run.run_dir}", style="bold", no_wrap=True, overflow="ignore")
    ]
    parts.extend(Text(f"{phase:>5}: {line}") for phase, line in training_facts(run))
    if run.evals:
        parts.append(_console_table("evals", run.evals))
        parts.extend(Text(line) for line in paired_lines(run.evals))
    else:
        parts.append(Text("evals: not available (no eval_*/ directories)", style="dim"))
    if run.natural:
        parts.append(_console_table("natural held-out set (questions in people's words)", run.natural))
        parts.extend(Text(line) for line in paired_lines(run.natural))
    labelled = [dict(a, kind=f"{a['source']}: {a['kind']}") for a in alarms]
    parts.extend(alarm_panels(labelled) or [Text("no alarms", style="green")])
    parts.extend(Text(f"note: {n}", style="dim") for n in run.notes)
    return Group(*parts)


def _console_table(title: str, evals: Mapping[str, Mapping[str, Any]]) -> Table:
    header, rows, styles = eval_rows(evals)
    table = Table(title=title)
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row, style in zip(rows, styles, strict=True):
        table.add_row(*([*row[:-1], Text(row[-1], style=style)] if len(header) > 2 else row))
    return table


def _html_evals(evals: Mapping[str, Mapping[str, Any]]) -> list[str]:
    header, rows, styles = eval_rows(evals)
    table = _html_table(header, rows, last_col_classes=styles if len(header) > 2 else None)
    return [table, *(f"<p>{html.escape(line)}</p>" for line in paired_lines(evals))]


def render_html(run: RunData, sections: Sequence[Section], alarms: Sequence[Mapping[str, Any]]) -> str:
    e = html.escape
    body = [f"<h1>mcprl run report: {e(run.run_dir.name)}</h1>", f'<p class="muted">{e(str(run.run_dir))}</p>']
    body.append("<h2>Alarms</h2>")
    if alarms:
        body += [
            f'<div class="alarm {e(a["level"])}"><b>{e(a["source"])}: {e(a["kind"])}</b><br>{e(a["message"])}</div>'
            for a in alarms
        ]
    else:
        body.append('<p class="ok">No alarms.</p>')
    body.append("<h2>Training</h2>")
    body.append(
        _html_table(["phase", "summary (start → end)"], [list(f) for f in training_facts(run)], css_class="facts")
    )
    body.append("<h2>Evals</h2>")
    if run.evals:
        body += _html_evals(run.evals)
    else:
        body.append('<p class="na">Not available: the run has no eval_*/ directories.</p>')
    if run.natural:
        body.append("<h2>Natural held-out set (questions in people's words)</h2>")
        body += _html_evals(run.natural)
    for s in sections:
        body.append(f"<h2>{e(s.title)}</h2>")
        if s.image is not None:
            body.append(f'<img src="{e(s.image.name)}" alt="{e(s.title)}">')
        else:
            body.append(f'<p class="na">Not available: {e(s.missing or "")}.</p>')
    if run.notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in run.notes) + "</ul>")
    if run.config_text:
        body.append(f"<h2>Config</h2><details><summary>config.yaml</summary><pre>{e(run.config_text)}</pre></details>")
    return _PAGE.format(title=e(f"mcprl report: {run.run_dir.name}"), body="\n".join(body))


def _draw_charts(run: RunData, out_dir: Path) -> list[Section]:
    sections = []
    for key, (title, draw) in CHARTS.items():
        fig = draw(run)
        path = out_dir / f"{key}.png"
        if isinstance(fig, str):
            path.unlink(missing_ok=True)
            sections.append(Section(key, title, None, fig))
            continue
        fig.savefig(path, dpi=100)
        sections.append(Section(key, title, path, None))
    return sections


def _start_end(df: pd.DataFrame, col: str, fmt: Callable[[float], str]) -> str:
    if col not in df or df[col].isna().all():
        return "not logged"
    values = df[col].dropna()
    n = max(1, len(values) // 10)
    return f"{fmt(values.head(n).mean())} → {fmt(values.tail(n).mean())}"


def _as_text(renderable: RenderableType) -> str:
    console = Console(file=io.StringIO(), record=True, width=SUMMARY_WIDTH, color_system=None)
    console.print(renderable)
    return console.export_text()


def _html_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    last_col_classes: Sequence[str] | None = None,
    css_class: str = "",
) -> str:
    e = html.escape
    out = [
        f'<table class="{css_class}"><thead><tr>' + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr></thead><tbody>"
    ]
    for i, row in enumerate(rows):
        cells = [f"<td>{e(c)}</td>" for c in row]
        if last_col_classes is not None:
            cells[-1] = f'<td class="{e(last_col_classes[i])}">{e(row[-1])}</td>'
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>
body {{ font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 980px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }}
h1 {{ font-size: 1.5em; margin-bottom: 0.1em; }}
h2 {{ font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }}
.muted {{ color: #777; margin-top: 0; }}
table {{ border-collapse: collapse; font-size: 0.92em; }}
th, td {{ padding: 0.3em 0.8em; border-bottom: 1px solid #eee; text-align: right; }}
th:first-child, td:first-child, table.facts td, table.facts th {{ text-align: left; }}
thead th {{ background: #f5f5f5; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
.alarm {{ padding: 0.7em 1em; margin: 0.5em 0; border-radius: 4px; }}
.alarm.error {{ background: #fdecea; border-left: 5px solid #c62828; color: #8e0000; }}
.alarm.warning {{ background: #fff8e1; border-left: 5px solid #f9a825; }}
.ok {{ color: #2e7d32; }}
.na {{ color: #888; font-style: italic; }}
td.green {{ color: #2e7d32; }}
td.red {{ color: #c62828; }}
td.dim {{ color: #888; }}
pre {{ background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }}
</style>
</head>
<body>
{body}
</body>
</html>
"""
