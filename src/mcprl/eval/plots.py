"""The report's charts. Each function returns a matplotlib Figure, or a short reason why the
run has no data for it. Figures are built without pyplot, so no GUI backend is ever touched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter

from mcprl.eval.patterns import PATTERNS
from mcprl.eval.run import RunData
from mcprl.eval.signal import MIN_SIGNAL_FRACTION
from mcprl.eval.trajectory import sort_groups

WIDE = (9.0, 3.6)
GRID = (9.0, 6.0)


@dataclass(frozen=True)
class Panel:
    """One metric's curve in a chart of GRPO steps (see `_curve`)."""

    col: str
    title: str
    band: str | None = None
    ylim: tuple[float, float] | None = None
    hline: float | None = None


def _grpo_chart(run: RunData, figsize: tuple[float, float], *panels: Panel, needs: Sequence[str] = (),
                why_none: str | None = None) -> tuple[Figure, list[Axes]] | str:
    """The panels side by side (a 2 x 2 grid for four), or why none has data: none of `needs` (default: the
    panels' columns) logged."""
    df = run.grpo
    cols = list(needs) or [p.col for p in panels]
    if not _has(df, *cols):
        return why_none or f"no GRPO steps with {', '.join(cols[:-1])} or {cols[-1]} in metrics.jsonl"
    fig = Figure(figsize=figsize, layout="constrained")
    axes = list(np.ravel(fig.subplots(2, 2) if len(panels) == 4 else fig.subplots(1, len(panels))))
    for ax, p in zip(axes, panels):
        _curve(ax, df, p.col, p.title, band=p.band, ylim=p.ylim, hline=p.hline)
    return fig, axes


def reward_success(run: RunData) -> Figure | str:
    chart = _grpo_chart(run, WIDE, Panel("reward_mean", "reward (mean over batch)", band="reward_std"),
                        Panel("success_rate", "success rate", ylim=(0, 1)))
    if isinstance(chart, str):
        return chart
    fig, (_, ax_s) = chart
    if _has(run.grpo, "guard_success"):
        _guard_probes(ax_s, run.grpo)
    return fig


def _guard_probes(ax: Axes, df: pd.DataFrame) -> None:
    """experimental.guard's greedy probes beside the sampled success: a collapse shows in these first."""
    probes = df[["step", "guard_success", "guard_restored"]].dropna(subset=["guard_success"])
    ax.plot(probes["step"], probes["guard_success"], marker="s", ms=4, lw=1.2, color="tab:green",
            label="guard probe (greedy)")
    restored = probes[probes["guard_restored"] > 0]
    ax.scatter(restored["step"], restored["guard_success"], marker="x", s=60, color="tab:red", zorder=3,
               label="best weights restored")
    ax.legend(loc="best", fontsize="small")


def ppo_health(run: RunData) -> Figure | str:
    last = "entropy" if _has(run.grpo, "entropy") else "grad_norm"
    chart = _grpo_chart(run, GRID, Panel("ratio_mean", "importance ratio (mean ± std)", band="ratio_std", hline=1.0),
                        Panel("kl", "KL to reference"), Panel("clip_frac", "clip fraction"),
                        Panel(last, last.replace("_", " ")), needs=("ratio_mean", "kl", "clip_frac"))
    return chart if isinstance(chart, str) else chart[0]


def critic(run: RunData) -> Figure | str:
    """PPO's value model: a critic that learns shows its explained variance rising above 0 and its loss falling."""
    chart = _grpo_chart(run, GRID, Panel("critic_value_loss", "value loss"),
                        Panel("critic_explained_variance", "explained variance of the returns", hline=0.0),
                        Panel("critic_values_mean", "values (mean)"), Panel("critic_returns_mean", "returns (mean)"),
                        why_none="no critic in this run (algo.advantage_estimator: gae trains one)")
    return chart if isinstance(chart, str) else chart[0]


def tool_rates(run: RunData) -> Figure | str:
    df = run.grpo
    cols = [c for c in ("tool_success_rate", "tool_timeout_rate", "malformed_rate") if _has(df, c)]
    if not cols:
        return "no GRPO steps with tool_success_rate, tool_timeout_rate or malformed_rate in metrics.jsonl"
    fig = Figure(figsize=WIDE, layout="constrained")
    ax = fig.subplots()
    for col in cols:
        ax.plot(df["step"], df[col], marker="o" if len(df) <= 40 else None, ms=3, label=col.replace("_", " "))
    ax.set(title="tool calls over training", xlabel="step", ylim=(-0.02, 1.02))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="best", fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def learning_signal(run: RunData) -> Figure | str:
    chart = _grpo_chart(run, WIDE, Panel("frac_prompts_with_signal", "prompts with reward variance > 0", ylim=(0, 1)),
                        Panel("reward_var_per_prompt_mean", "reward variance per prompt (mean)"))
    if isinstance(chart, str):
        return chart
    fig, (ax_f, _) = chart
    ax_f.axhline(MIN_SIGNAL_FRACTION, color="tab:red", ls="--", lw=1, label=f"warning below {MIN_SIGNAL_FRACTION:.0%}")
    ax_f.legend(loc="best", fontsize="small")
    return fig


def sft_loss(run: RunData) -> Figure | str:
    df = run.sft
    if not _has(df, "sft_loss"):
        return "no SFT steps in metrics.jsonl"
    fig = Figure(figsize=WIDE, layout="constrained")
    _curve(fig.subplots(), df, "sft_loss", "SFT loss")
    return fig


def success_by_complexity(run: RunData) -> Figure | str:
    if not run.evals:
        return "no eval_*/ directories in the run"
    groups = sort_groups({g for r in run.evals.values() for g in r.get("by_complexity", {})})
    cats = ["overall", *groups]
    values = {
        name: [_metric(r["overall"] if c == "overall" else r.get("by_complexity", {}).get(c, {})) for c in cats]
        for name, r in run.evals.items()
    }
    fig = Figure(figsize=WIDE, layout="constrained")
    ax = fig.subplots()
    _grouped_bars(ax, cats, values, pct=True)
    ax.set(title="success (pass@1) by complexity, per eval", ylim=(0, 1.1), ylabel="pass@1")
    return fig


def error_patterns(run: RunData) -> Figure | str:
    evals = {n: r for n, r in run.evals.items() if "patterns" in r}
    if not evals:
        return "no eval with error-pattern counts"
    values = {n: [r["patterns"]["rates"].get(p) or 0.0 for p in PATTERNS] for n, r in evals.items()}
    fig = Figure(figsize=(9.0, 4.2), layout="constrained")
    ax = fig.subplots()
    _grouped_bars(ax, [p.replace("_", "\n") for p in PATTERNS], values, pct=True)
    ax.set(title="share of trajectories with each error pattern", ylim=(0, 1.1))
    ax.tick_params(axis="x", labelsize="small")
    return fig


CHARTS = {
    "reward_success": ("Reward and success over training", reward_success),
    "ppo_health": ("PPO health: importance ratio, KL, clipping", ppo_health),
    "critic": ("PPO critic: value loss, explained variance, values and returns", critic),
    "tool_rates": ("Tool-call outcomes over training", tool_rates),
    "learning_signal": ("GRPO learning signal", learning_signal),
    "sft_loss": ("SFT loss", sft_loss),
    "success_by_complexity": ("Success by complexity, before vs after", success_by_complexity),
    "error_patterns": ("Error patterns per eval", error_patterns),
}


def _has(df: pd.DataFrame, *cols: str) -> bool:
    return any(c in df and df[c].notna().any() for c in cols)


def _curve(
    ax: Axes,
    df: pd.DataFrame,
    col: str,
    title: str,
    *,
    band: str | None = None,
    ylim: tuple[float, float] | None = None,
    hline: float | None = None,
) -> None:
    """One metric over steps, with a ±band when given and a rolling mean when the curve is long."""
    ax.set(title=title, xlabel="step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if col not in df or df[col].isna().all():
        ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        return
    d = df[["step", col] + ([band] if band and band in df else [])].dropna(subset=[col])
    ax.plot(d["step"], d[col], marker="o" if len(d) <= 40 else None, ms=3, lw=1.2, color="tab:blue")
    if band and band in d and d[band].notna().any():
        ax.fill_between(d["step"], d[col] - d[band], d[col] + d[band], alpha=0.2, color="tab:blue", lw=0)
    if len(d) >= 20:
        window = max(3, len(d) // 10)
        ax.plot(
            d["step"],
            d[col].rolling(window, min_periods=1, center=True).mean(),
            color="tab:orange",
            lw=2,
            label=f"rolling mean ({window})",
        )
        ax.legend(loc="best", fontsize="small")
    if hline is not None:
        ax.axhline(hline, color="gray", ls="--", lw=1)
    if ylim is not None:
        ax.set_ylim(*(ylim[0] - 0.02, ylim[1] + 0.02))


def _grouped_bars(ax: Axes, cats: Sequence[str], values: dict[str, list[float | None]], *, pct: bool) -> None:
    x = np.arange(len(cats))
    width = 0.8 / max(1, len(values))
    for i, (name, vals) in enumerate(values.items()):
        heights = [np.nan if v is None else v for v in vals]
        bars = ax.bar(x + (i - (len(values) - 1) / 2) * width, heights, width, label=name)
        labels = ["" if np.isnan(h) else (f"{h:.0%}" if pct else f"{h:.2f}") for h in heights]
        ax.bar_label(bars, labels=labels, fontsize="x-small", padding=1)
    ax.set_xticks(x, cats)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    if pct:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(axis="y", alpha=0.3)


def _metric(group: dict) -> float | None:
    value = group.get("pass@1", group.get("success_rate"))
    return None if value is None else float(value)
