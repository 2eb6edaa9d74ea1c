"""`experimental.guard`: GRPO ends on the weights whose greedy probe was best, and goes back to them when a probe falls.

Why: at one seed eight GRPO steps took held-out success from 70.8% to 50.0% while the sampled rewards of its
steps rose; only greedy answers showed the collapse (docs/experiments/). So every `every` steps, and after the
last, the policy answers the same seeded training tasks greedily. A probe at least as good as the best becomes the
best (its checkpoint is saved and never pruned); one below the best by more than `tolerance` brings the best
checkpoint's weights and optimizer back, and GRPO goes on from there with the prompts that come next.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import PreTrainedModel

from mcprl.data.sample import SkyRLSample
from mcprl.training.checkpoint import TrainState, checkpoint_dir, restore_policy
from mcprl.training.config import GuardConfig, TrainConfig
from mcprl.training.experimental.greedy import greedy_successes, tasks_per_family
from mcprl.training.loop.hooks import GRPOHook
from mcprl.training.policy import Policy
from mcprl.training.run import Run, console

Probe = Callable[[int], float]  # GRPO step -> greedy success rate on the guard's tasks


class Guard:
    def __init__(self, config: GuardConfig, state: TrainState, probe: Probe, run_dir: Path) -> None:
        self.config, self.state, self.probe, self.run_dir = config, state, probe, Path(run_dir)

    def due(self, step: int, last: int) -> bool:
        return step % self.config.every == 0 or step == last

    def begin(self, warm_start: Path | None, save: Callable[[], Path]) -> None:
        """Probe the weights GRPO starts from (once: a resumed run keeps its record); they are the first best."""
        if self.state.guard is not None:
            return
        step = self.state.grpo_step
        score = self.probe(step)
        checkpoint = warm_start if warm_start is not None else save()
        self.state.guard = {"best": score, "best_step": step, "checkpoint": str(Path(checkpoint).resolve()),
                            "probes": [[step, score, "best"]]}

    def check(self, step: int, last: int, model: PreTrainedModel, optimizer: torch.optim.Optimizer) -> str:
        """Probe after `step`: "best" (the caller saves this step's checkpoint, which the record now names),
        "kept", or "restored" (the best checkpoint's weights and optimizer are back in place)."""
        record, score = self.state.guard, self.probe(step)
        tolerance = 0.0 if step == last else self.config.tolerance
        if score >= record["best"]:
            record.update(best=score, best_step=step, checkpoint=str(checkpoint_dir(self.run_dir, self.state).resolve()))
            action = "best"
        elif score < record["best"] - tolerance:
            restore_policy(Path(record["checkpoint"]), model, optimizer)
            action = "restored"
        else:
            action = "kept"
        record["probes"].append([step, score, action])
        return action


def build_guard(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], state: TrainState, run_dir: Path) -> Guard:
    """The guard's probe: the same seeded training tasks, `per_family` of each family, every time."""
    config = cfg.experimental.guard
    chosen = tasks_per_family(tasks, config.per_family, random.Random(f"{cfg.run.seed}:guard"))

    def probe(step: int) -> float:
        t0 = time.perf_counter()
        successes = greedy_successes(policy, cfg, chosen, run_dir, f"grpo_guard_{step}")
        rate = sum(successes) / len(successes)
        console.print(f"guard: step {step} solved {sum(successes)} of {len(chosen)} training tasks greedily "
                      f"({rate:.1%}, {time.perf_counter() - t0:.0f} s)")
        return rate

    return Guard(config, state, probe, run_dir)


class GuardHook(GRPOHook):
    def __init__(self, run: Run) -> None:
        self.run = run
        self.guard = build_guard(run.policy, run.cfg, run.train_tasks, run.state, run.dir)

    def begin(self, save: Callable[[], Path]) -> None:
        self.guard.begin(self.run.checkpoint, save)

    def after_step(self, optimizer: torch.optim.Optimizer, metrics: dict[str, Any]) -> bool:
        """A probe when due: after a fall the best weights come back (to the engine too); a new best is saved."""
        run, steps = self.run, self.run.cfg.algo.steps
        if not self.guard.due(run.state.grpo_step, steps):
            return False
        action = self.guard.check(run.state.grpo_step, steps, run.policy.model, optimizer)
        if action == "restored":
            run.policy.engine.sync_weights()
        record = run.state.guard
        console.print(f"guard: {action} (best {record['best']:.1%} at step {record['best_step']})")
        metrics |= {"guard_success": record["probes"][-1][1], "guard_restored": float(action == "restored")}
        return action == "best"
