"""Is there anything for GRPO to learn from, and is the policy dropping its tools?

GRPO's advantage is reward minus the group mean, so a prompt whose K samples all get the same
reward contributes nothing. Tool-use collapse (the policy learns to answer without calling tools)
is the classic failure of tool RL; both are raised as `Alarm`s that the console shows in red and
that land in `aggregated_results.json["alarms"]`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from mcprl.eval.fmt import num, pct
from mcprl.eval.trajectory import TrajectoryLike, as_trajectories

MIN_SIGNAL_FRACTION = 0.25
MIN_TOOL_FRACTION = 0.5


@dataclass(frozen=True)
class Alarm:
    kind: str
    level: Literal["error", "warning"]
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SignalReport:
    """Reward spread across the K samples of each prompt (prompts with at least 2 samples)."""

    n_prompts: int
    frac_with_signal: float | None
    mean_variance: float | None
    frac_all_success: float | None
    frac_all_fail: float | None
    variance_per_prompt: dict[str, float]
    warning: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reward_variance_per_prompt(trajectories: Iterable[TrajectoryLike]) -> dict[str, float]:
    """Population variance of the reward over each prompt's samples; prompts with one sample are left out."""
    rewards: dict[str, list[float]] = defaultdict(list)
    for t in as_trajectories(trajectories):
        rewards[t.task_id].append(t.reward)
    return {task: float(np.var(r)) for task, r in rewards.items() if len(r) >= 2}


def analyze_signal(trajectories: Iterable[TrajectoryLike], min_fraction: float = MIN_SIGNAL_FRACTION) -> SignalReport:
    trajs = as_trajectories(trajectories)
    variances = reward_variance_per_prompt(trajs)
    successes: dict[str, list[bool]] = defaultdict(list)
    for t in trajs:
        successes[t.task_id].append(t.success)
    n = len(variances)
    if n == 0:
        return SignalReport(0, None, None, None, None, {}, None)
    flat = [task for task, v in variances.items() if v <= 1e-12]
    frac_signal = 1 - len(flat) / n
    all_success = sum(all(successes[task]) for task in flat) / n
    all_fail = sum(not any(successes[task]) for task in flat) / n
    return SignalReport(
        n_prompts=n,
        frac_with_signal=frac_signal,
        mean_variance=float(np.mean(list(variances.values()))),
        frac_all_success=all_success,
        frac_all_fail=all_fail,
        variance_per_prompt=variances,
        warning=low_signal_warning(frac_signal, all_success, all_fail, min_fraction),
    )


def low_signal_warning(
    frac_with_signal: float, frac_all_success: float, frac_all_fail: float, min_fraction: float = MIN_SIGNAL_FRACTION
) -> str | None:
    """A warning naming the likely cause when too few prompts give GRPO a gradient."""
    if frac_with_signal >= min_fraction:
        return None
    easy = None if frac_all_success == frac_all_fail else frac_all_success > frac_all_fail
    return (
        f"only {frac_with_signal:.0%} of prompts have reward variance > 0 across their samples "
        f"(GRPO learns from nothing else; want >= {min_fraction:.0%}); "
        f"{frac_all_success:.0%} always succeed, {frac_all_fail:.0%} always fail, so {_verdict(easy)}"
    )


def training_signal_alarm(
    frac_with_signal: float, success_rate: float | None, n_steps: int, min_fraction: float = MIN_SIGNAL_FRACTION
) -> Alarm | None:
    """The same check on training metrics (mean over recent steps), where only the success rate
    hints at which side the flat groups are on."""
    if frac_with_signal >= min_fraction:
        return None
    easy = None if success_rate is None else success_rate >= 0.5
    message = (
        f"over the last {n_steps} GRPO steps only {frac_with_signal:.0%} of prompts had reward variance > 0 "
        f"(want >= {min_fraction:.0%}); success rate {pct(success_rate)}, so {_verdict(easy)}"
    )
    details = {"frac_with_signal": frac_with_signal, "success_rate": success_rate, "n_steps": n_steps}
    return Alarm("low_grpo_signal", "warning", message, details)


def _verdict(easy: bool | None) -> str:
    if easy is True:
        return "the prompts look too easy: use harder tasks or drop the ones every sample solves"
    if easy is False:
        return "the prompts look too hard: add easier tasks, an SFT warm-up or shaped rewards"
    return "rewards are flat within groups: check that the reward separates good and bad episodes"


def signal_alarm(report: SignalReport) -> Alarm | None:
    if report.warning is None:
        return None
    details = {k: v for k, v in report.to_dict().items() if k not in ("variance_per_prompt", "warning")}
    return Alarm("low_grpo_signal", "warning", report.warning, details)


def check_tool_collapse(
    current: Mapping[str, Any],
    reference: Mapping[str, Any],
    min_fraction: float = MIN_TOOL_FRACTION,
    *,
    current_name: str = "this checkpoint",
    reference_name: str = "the reference",
) -> Alarm | None:
    """Alarm when tool use (share of trajectories with a call, or calls per trajectory) falls
    below `min_fraction` of the reference's; takes aggregated results or their "overall" block."""
    cur, ref = _overall(current), _overall(reference)
    fallen = {}
    for key in ("tool_call_rate", "mean_tool_calls"):
        c, r = cur.get(key), ref.get(key)
        if c is not None and r is not None and r > 0 and c < min_fraction * r:
            fallen[key] = {"current": c, "reference": r}
    if not fallen:
        return None
    rate_c, rate_r = cur.get("tool_call_rate"), ref.get("tool_call_rate")
    calls_c, calls_r = cur.get("mean_tool_calls"), ref.get("mean_tool_calls")
    message = (
        f"TOOL-USE COLLAPSE: {current_name} calls tools in {pct(rate_c)} of trajectories "
        f"({num(calls_c)} calls each) vs {pct(rate_r)} ({num(calls_r)}) for {reference_name}, "
        f"below {min_fraction:.0%} of it. The policy is learning to answer without tools: "
        "check that the reward needs tool results, and lower the learning rate or raise the KL weight."
    )
    return Alarm("tool_collapse", "error", message, {"min_fraction": min_fraction, **fallen})


def _overall(results: Mapping[str, Any]) -> Mapping[str, Any]:
    return results.get("overall", results)
