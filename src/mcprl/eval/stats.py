"""How sure an eval on a few dozen tasks is: a 95% interval for pass@1, and a paired test between two
evals of the same tasks. On 24 tasks one task is 4.2 points and the interval around 75% spans about
55-88%, so a gain of one or two tasks is not evidence of anything."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

Z95 = 1.959964


def wilson_interval(mean: float, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval of a success rate over `n` tasks (None without tasks). It stays inside [0, 1]
    and keeps its coverage at small n and rates near 0 or 1, where mean +- z*se does not. `mean` may be a
    mean of per-task rates (several samples per task); counting tasks, not samples, is then conservative."""
    if n <= 0:
        return None
    centre = (mean + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def sign_test(better: int, worse: int) -> float:
    """Exact two-sided p-value that `better` vs `worse` paired changes arose by chance (McNemar's exact
    test when each task has one sample); tasks that did not change carry no information."""
    n = better + worse
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(better, worse) + 1)) / 2**n
    return min(1.0, 2 * tail)


@dataclass(frozen=True)
class Paired:
    """Eval B against eval A on the tasks both ran: per-task pass@1 went up, down or stayed."""

    tasks: int
    better: int
    worse: int
    same: int
    delta: float  # mean per-task pass@1 of B minus A, over the shared tasks
    p_value: float
    # The same test over task families (a family's summed pass@1 went up, down or stayed), None when the
    # tasks have no family: a small model fails a template's chain as a whole, so its tasks are not
    # independent and the task-level p value overstates the evidence when a family flips.
    families: int | None = None
    families_better: int | None = None
    families_worse: int | None = None
    families_p_value: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self, name_a: str = "A", name_b: str = "B") -> str:
        text = (f"{name_b} vs {name_a}, paired over {self.tasks} tasks: better on {self.better}, worse on "
                f"{self.worse}, same on {self.same}; pass@1 {self.delta * 100:+.1f}pp, sign test p = {self.p_value:.2g}")
        if self.families is not None:
            text += (f"; over {self.families} task families: up {self.families_better}, down "
                     f"{self.families_worse}, p = {self.families_p_value:.2g}")
        return text


def paired(a: Mapping[str, float], b: Mapping[str, float], families: Mapping[str, str] | None = None) -> Paired | None:
    """Compare per-task pass@1 maps (task id -> rate), and by family when `families` (task id -> family)
    names every shared task; None when the evals share no task."""
    shared = sorted(set(a) & set(b))
    if not shared:
        return None
    better, worse = _changes((a[t], b[t]) for t in shared)
    test = Paired(len(shared), better, worse, len(shared) - better - worse,
                  sum(b[t] - a[t] for t in shared) / len(shared), sign_test(better, worse))
    if not families or any(t not in families for t in shared):
        return test
    sums: dict[str, tuple[float, float]] = {}
    for t in shared:
        sa, sb = sums.get(families[t], (0.0, 0.0))
        sums[families[t]] = (sa + a[t], sb + b[t])
    up, down = _changes(sums.values())
    return replace(test, families=len(sums), families_better=up, families_worse=down,
                   families_p_value=sign_test(up, down))


def _changes(pairs: Iterable[tuple[float, float]]) -> tuple[int, int]:
    """How many (a, b) pairs went up and how many went down."""
    diffs = [b - a for a, b in pairs]
    return sum(d > 1e-12 for d in diffs), sum(d < -1e-12 for d in diffs)
