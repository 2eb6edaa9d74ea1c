"""pass@k, pass^k and the aggregate metrics of an eval (overall, per data source, per complexity), with
pass@1's 95% interval and each task's pass@1 (for paired comparisons, eval/stats.py)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from mcprl.eval.stats import wilson_interval
from mcprl.eval.trajectory import Trajectory, TrajectoryLike, as_trajectories, sort_groups

CI_KEY = "ci95_pass@1"  # [low, high]: pass@1's 95% interval over the group's tasks


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}; sample at least k times per task")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased P(at least one of k samples succeeds) from n samples with c successes.

    1 - C(n-c, k)/C(n, k) as the product prod_{i=n-c+1..n} (1 - k/i) (Chen et al. 2021),
    which never forms the huge binomials.
    """
    _check(n, c, k)
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased P(all k of k samples succeed), pass^k (tau-bench): C(c, k)/C(n, k)."""
    _check(n, c, k)
    if c < k:
        return 0.0
    return float(np.prod((c - np.arange(k)) / (n - np.arange(k))))


def default_ks(trajectories: Sequence[Trajectory]) -> tuple[int, ...]:
    """(1, K) with K the smallest number of samples any task has."""
    counts = _samples_per_task(trajectories)
    k = min((len(v) for v in counts.values()), default=1)
    return (1,) if k <= 1 else (1, k)


def aggregate(
    trajectories: Iterable[TrajectoryLike],
    ks: Sequence[int] | None = None,
    *,
    max_input_tokens: int | None = None,
) -> dict[str, Any]:
    """Metrics overall, by data_source and by complexity.

    pass@k / pass^k average over tasks with at least k samples (None when no task has k).
    Rates with an empty denominator (no tool calls, no turns) are None, not 0.
    """
    trajs = as_trajectories(trajectories)
    ks = tuple(sorted(set(ks))) if ks else default_ks(trajs)
    per_task = _samples_per_task(trajs)
    return {
        "overall": group_metrics(trajs, ks, max_input_tokens),
        "by_data_source": _by(trajs, lambda t: t.data_source, ks, max_input_tokens),
        "by_complexity": _by(trajs, lambda t: t.complexity, ks, max_input_tokens),
        "by_family": _by(trajs, lambda t: t.family or t.data_source, ks, max_input_tokens),
        "by_style": _by(trajs, lambda t: str(t.env_extras.get("style") or "unknown"), ks, max_input_tokens),
        "n_tasks": len(per_task),
        "n_trajectories": len(trajs),
        "k": max(ks),
        "ks": list(ks),
        "per_task": {task: float(np.mean(s)) for task, s in sorted(per_task.items())},
        "task_family": {t.task_id: t.family for t in sorted(trajs, key=lambda t: t.task_id) if t.family is not None},
    }


def group_metrics(trajs: Sequence[Trajectory], ks: Sequence[int], max_input_tokens: int | None = None) -> dict:
    per_task = _samples_per_task(trajs)
    calls = [c for t in trajs for c in t.tool_calls]
    turns = [turn for t in trajs for turn in t.turns]
    out: dict[str, Any] = {"n_tasks": len(per_task), "n_trajectories": len(trajs)}
    for k in ks:
        eligible = [(len(s), sum(s)) for s in per_task.values() if len(s) >= k]
        out[f"pass@{k}"] = _mean([pass_at_k(n, c, k) for n, c in eligible])
        if k > 1:  # pass^1 is pass@1
            out[f"pass^{k}"] = _mean([pass_hat_k(n, c, k) for n, c in eligible])
        elif out["pass@1"] is not None:
            out[CI_KEY] = list(wilson_interval(out["pass@1"], len(eligible)))
    out |= {
        "success_rate": _mean([t.success for t in trajs]),
        "mean_reward": _mean([t.reward for t in trajs]),
        "mean_turns": _mean([t.n_turns for t in trajs]),
        "mean_tool_calls": _mean([len(t.tool_calls) for t in trajs]),
        "tool_call_rate": _mean([bool(t.tool_calls) for t in trajs]),
        "tool_error_rate": _mean([c.result is not None and not c.result.ok for c in calls]),
        "injected_fault_rate": _mean([c.result is not None and bool(getattr(c.result, "injected_fault", None))
                                      for c in calls]),
        "malformed_rate": _mean([turn.kind == "malformed" for turn in turns]),
        "answer_rate": _mean([t.answered for t in trajs]),
        "false_completion_rate": _mean([false_completion(t) for t in trajs]),
        "failed_call_rate": _mean([bool(failed) for failed in map(failed_calls, trajs)]),
        "recovery_rate": _mean([t.success for t in trajs if failed_calls(t)]),
        "answer_after_error_rate": _mean([answered_after_error(t) for t in trajs if failed_calls(t)]),
        "context_overflow_rate": _mean([t.overflowed(max_input_tokens) for t in trajs]),
        "mean_response_tokens": _mean([t.response_tokens for t in trajs]),
    }
    return out


def failed_calls(t: Trajectory) -> list[int]:
    """Turn indexes of the calls that came back with an error."""
    return [i for i, turn in enumerate(t.turns) if turn.result is not None and not turn.result.ok]


def false_completion(t: Trajectory) -> bool:
    """Answered, and the answer was wrong (or did not solve the task)."""
    return t.answered and (t.answer_correct is False or (t.answer_correct is None and not t.success))


def answered_after_error(t: Trajectory) -> bool:
    """A wrong answer given while the last call had failed: the number made up after an error."""
    failed, ok = failed_calls(t), [i for i, turn in enumerate(t.turns) if turn.result is not None and turn.result.ok]
    return bool(failed) and false_completion(t) and (not ok or max(ok) < max(failed))


def _by(
    trajs: Sequence[Trajectory], key: Callable[[Trajectory], str], ks: Sequence[int], max_input_tokens: int | None
) -> dict[str, dict]:
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[key(t)].append(t)
    return {g: group_metrics(groups[g], ks, max_input_tokens) for g in sort_groups(groups)}


def _samples_per_task(trajs: Sequence[Trajectory]) -> dict[str, list[bool]]:
    per_task: dict[str, list[bool]] = defaultdict(list)
    for t in trajs:
        per_task[t.task_id].append(t.success)
    return per_task


def _mean(values: Sequence[float | bool]) -> float | None:
    return float(np.mean(values)) if len(values) else None
