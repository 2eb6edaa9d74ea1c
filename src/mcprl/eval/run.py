"""What a training run directory holds, loaded once for the report: per-step metrics, config,
summary.json and every eval (`eval_*/` directories, or `eval_*` entries of summary.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from mcprl.eval.errors import EvalError, RunDirError
from mcprl.eval.results import load_results
from mcprl.metric_names import short

EVAL_ORDER = ("base", "sft", "grpo")
NATURAL = "natural_"  # eval_natural_{base,sft,grpo}/: the natural held-out set (eval.natural), a table of its own


@dataclass
class RunData:
    run_dir: Path
    metrics: pd.DataFrame
    config_text: str | None
    summary: dict[str, Any]
    evals: dict[str, dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    natural: dict[str, dict[str, Any]] = field(default_factory=dict)  # the natural set's evals, same names

    @property
    def grpo(self) -> pd.DataFrame:
        return self.metrics[self.metrics["phase"] == "grpo"] if len(self.metrics) else self.metrics

    @property
    def sft(self) -> pd.DataFrame:
        return self.metrics[self.metrics["phase"] == "sft"] if len(self.metrics) else self.metrics


def load_run(run_dir: Path) -> RunData:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"run directory {run_dir} does not exist; pass the directory `mcprl train` wrote")
    notes: list[str] = []
    metrics = load_metrics(run_dir / "metrics.jsonl", notes)
    summary = _load_summary(run_dir / "summary.json", notes)
    loaded = _load_evals(run_dir, summary, notes)
    evals = {k: v for k, v in loaded.items() if not k.startswith(NATURAL)}
    natural = {k.removeprefix(NATURAL): v for k, v in loaded.items() if k.startswith(NATURAL)}
    if metrics.empty and not evals:
        raise RunDirError(f"{run_dir} has no metrics.jsonl rows and no eval_*/ directories: nothing to report")
    config = run_dir / "config.yaml"
    return RunData(run_dir, metrics, config.read_text() if config.is_file() else None, summary, evals, notes,
                   {name: natural[name] for name in sorted(natural, key=eval_sort_key)})


def load_metrics(path: Path, notes: list[str]) -> pd.DataFrame:
    """One row per optimizer step, numeric columns as floats (missing keys -> NaN), sorted by step.

    Unparseable lines (a run killed mid-write) are skipped with a note rather than failing the report.
    """
    if not path.is_file():
        notes.append(f"{path.name} not found: no training curves")
        return pd.DataFrame(columns=["step", "phase"])
    rows, bad = [], 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(row, dict):
            rows.append(short(row))
        else:
            bad += 1
    if bad:
        notes.append(f"{path.name}: skipped {bad} unreadable line(s)")
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=["step", "phase"])
    if "phase" not in df:
        df["phase"] = None
    has_sft_loss = df["sft_loss"].notna() if "sft_loss" in df else pd.Series(False, index=df.index)
    df["phase"] = df["phase"].where(df["phase"].notna(), has_sft_loss.map({True: "sft", False: "grpo"}))
    if "step" not in df:
        df["step"] = range(1, len(df) + 1)
    for col in df.columns:
        if col != "phase":
            df[col] = pd.to_numeric(df[col], errors="coerce")
    return df.sort_values("step", kind="stable").reset_index(drop=True)


def eval_sort_key(name: str) -> tuple[int, str]:
    return (EVAL_ORDER.index(name) if name in EVAL_ORDER else len(EVAL_ORDER), name)


def _load_summary(path: Path, notes: list[str]) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        summary = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        notes.append(f"{path.name} is not valid JSON ({err.msg}); ignored")
        return {}
    return summary if isinstance(summary, dict) else {}


def _load_evals(run_dir: Path, summary: dict[str, Any], notes: list[str]) -> dict[str, dict[str, Any]]:
    evals: dict[str, dict[str, Any]] = {}
    for d in sorted(p for p in run_dir.glob("eval_*") if p.is_dir()):
        try:
            evals[d.name.removeprefix("eval_")] = load_results(d)
        except EvalError as err:
            notes.append(f"{d.name}: {err}")
    for key, value in summary.items():
        name = key.removeprefix("eval_")
        if key.startswith("eval_") and name not in evals and isinstance(value, dict) and "overall" in value:
            evals[name] = value
    return {name: evals[name] for name in sorted(evals, key=eval_sort_key)}
