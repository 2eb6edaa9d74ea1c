"""Two evals side by side (`mcprl eval compare A B`): metric, A, B and a delta colored by whether it helps,
then the paired test over the tasks both ran (how many got better or worse, and whether that is chance)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from mcprl.eval.fmt import fmt_delta, fmt_value, metric_keys, spec
from mcprl.eval.render import alarm_panels
from mcprl.eval.results import load_results
from mcprl.eval.signal import check_tool_collapse
from mcprl.eval.stats import Paired, paired
from mcprl.eval.trajectory import sort_groups

GROUP_METRICS = ("mean_reward", "mean_tool_calls", "tool_error_rate")  # shown per complexity, after pass@k


def compare_table(a: Mapping[str, Any], b: Mapping[str, Any], name_a: str = "A", name_b: str = "B") -> Table:
    """All overall metrics, then the key metrics of each complexity either eval has."""
    table = Table(title=f"{name_a} vs {name_b}")
    for col, justify in (("group", "left"), ("metric", "left"), (name_a, "right"), (name_b, "right"), ("Δ", "right")):
        table.add_column(col, justify=justify)
    _add_group(table, "overall", a["overall"], b["overall"], metric_keys([a["overall"], b["overall"]]))
    ca, cb = a.get("by_complexity", {}), b.get("by_complexity", {})
    for group in sort_groups(set(ca) | set(cb)):
        ga, gb = ca.get(group, {}), cb.get(group, {})
        keys = [k for k in metric_keys([ga, gb]) if k in GROUP_METRICS or k.startswith("pass@")]
        table.add_section()
        _add_group(table, group, ga, gb, keys)
    return table


def compare_renderable(
    a: Mapping[str, Any], b: Mapping[str, Any], name_a: str = "A", name_b: str = "B"
) -> RenderableType:
    """The table, then B's tool-collapse check against A (unless B already has one) and both evals' own alarms."""
    alarms = [dict(al, kind=f"{name_a}: {al['kind']}") for al in a.get("alarms", [])]
    alarms += [dict(al, kind=f"{name_b}: {al['kind']}") for al in b.get("alarms", [])]
    collapse = check_tool_collapse(b, a, current_name=name_b, reference_name=name_a)
    if collapse is not None and not any(al["kind"] == "tool_collapse" for al in b.get("alarms", [])):
        alarms.insert(0, collapse.to_dict())
    parts: list[RenderableType] = [compare_table(a, b, name_a, name_b)]
    test = paired_results(a, b)
    if test is not None:
        parts.append(Text(test.describe(name_a, name_b)))
    return Group(*parts, *alarm_panels(alarms))


def paired_results(a: Mapping[str, Any], b: Mapping[str, Any]) -> Paired | None:
    """The paired test between two evals' results (None when either predates per-task results or they
    share no task)."""
    if "per_task" not in a or "per_task" not in b:
        return None
    return paired(a["per_task"], b["per_task"], {**a.get("task_family", {}), **b.get("task_family", {})})


def paired_evals(evals: Mapping[str, Mapping[str, Any]]) -> dict[str, Paired]:
    """Each eval against the one before it (base -> sft -> grpo), keyed `sft_vs_base`, `grpo_vs_sft`."""
    names = list(evals)
    tests = {f"{b}_vs_{a}": paired_results(evals[a], evals[b]) for a, b in zip(names, names[1:])}
    return {key: test for key, test in tests.items() if test is not None}


def compare_dirs(dir_a: Path, dir_b: Path, console: Console | None = None) -> None:
    a, b = load_results(dir_a), load_results(dir_b)
    name_a, name_b = Path(dir_a).name, Path(dir_b).name
    if name_a == name_b:
        name_a, name_b = str(dir_a), str(dir_b)
    (console or Console()).print(compare_renderable(a, b, name_a, name_b))


def _add_group(table: Table, group: str, a: Mapping[str, Any], b: Mapping[str, Any], keys: list[str]) -> None:
    for i, key in enumerate(keys):
        delta, style = fmt_delta(key, a.get(key), b.get(key))
        table.add_row(
            group if i == 0 else "",
            spec(key)[0],
            fmt_value(key, a.get(key)),
            fmt_value(key, b.get(key)),
            Text(delta, style=style),
        )
