"""`experimental.probe`: GRPO draws its prompts from the task families the warm start fails.

Why: a family the warm start always solves gives GRPO groups without reward variance, which dynamic sampling
then throws away; a family it fails is where the rollouts can teach something. The warm start answers
`per_family` seeded training tasks of each family greedily, once, before the first step (the rates stay in
the checkpoints, so a resumed run draws the same prompts); `share` of the prompts come from the families
below `keep_below`, the rest from every task.
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Iterator

from mcprl.data.sample import SkyRLSample
from mcprl.training.config import TrainConfig
from mcprl.training.experimental.greedy import greedy_successes, tasks_per_family
from mcprl.training.loop.hooks import GRPOHook
from mcprl.training.ordering import prompt_stream
from mcprl.training.policy import Policy
from mcprl.training.run import Run, console


class ProbeHook(GRPOHook):
    def __init__(self, run: Run) -> None:
        self.run = run

    def prompts(self, tasks: list[SkyRLSample], stream: Iterator[SkyRLSample]) -> Iterator[SkyRLSample]:
        """The failed families' tasks, mixed with `stream` (every task) at `share`; probed on a fresh GRPO phase."""
        cfg, state, probe = self.run.cfg, self.run.state, self.run.cfg.experimental.probe
        fresh = state.probe is None or state.grpo_step == 0
        if fresh:
            state.probe = probe_families(self.run.policy, cfg, tasks, self.run.dir)
        pool = focus_tasks(tasks, state.probe, probe.keep_below)
        if fresh:
            failed = ", ".join(f"{name} {rate:.2g}" for name, rate in sorted(state.probe.items())
                               if rate < probe.keep_below)
            mixed = f" ({probe.share:.0%} of the prompts; the rest from every task)" if probe.share < 1 else ""
            console.print("GRPO draws from " + (f"{len(pool)} of {len(tasks)} tasks{mixed}, the families the warm "
                                                f"start solved less than {probe.keep_below:g} of: {failed}" if failed
                                                else f"every family (none below {probe.keep_below:g})"))
        focus = prompt_stream(pool, cfg.run.seed, cfg.algo.prompt_order)
        return focus if probe.share == 1 else mixed_stream(focus, stream, probe.share)


def probe_families(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], run_dir: Path) -> dict[str, float]:
    """The warm start's greedy pass rate per task family, on `experimental.probe.per_family` seeded training tasks each."""
    k = cfg.experimental.probe.per_family
    chosen = tasks_per_family(tasks, k, random.Random(f"{cfg.run.seed}:probe"))
    t0 = time.perf_counter()
    successes = greedy_successes(policy, cfg, chosen, run_dir, "grpo_probe")
    console.print(f"probe: the warm start solved {sum(successes)} of {len(chosen)} "
                  f"training tasks, {k} per family, greedy ({time.perf_counter() - t0:.0f} s)")
    solved: dict[str, list[bool]] = {}
    for task, success in zip(chosen, successes):
        solved.setdefault(task.family, []).append(success)
    return {name: sum(v) / len(v) for name, v in solved.items()}


def focus_tasks(tasks: list[SkyRLSample], rates: dict[str, float], keep_below: float) -> list[SkyRLSample]:
    """The tasks of the families probed below `keep_below`; every task when no family is."""
    keep = {name for name, rate in rates.items() if rate < keep_below}
    return [t for t in tasks if t.family in keep] or tasks


def mixed_stream(focus: Iterator[SkyRLSample], whole: Iterator[SkyRLSample], share: float) -> Iterator[SkyRLSample]:
    """Prompt n from `focus` when floor((n + 1) * share) passes floor(n * share), else from `whole`: every prefix
    holds the share to within one prompt (a step of 3 at share 1/3: one focus prompt), reproducible from n."""
    n = 0
    while True:
        yield next(focus) if math.floor((n + 1) * share) > math.floor(n * share) else next(whole)
        n += 1
