"""`experimental.guard`: GRPO ends on the weights whose greedy probe was best, and goes back to them when a probe falls.

Why: at one seed eight GRPO steps took held-out success from 70.8% to 50.0% while the sampled rewards of its
steps rose; only greedy answers showed the collapse (docs/experiments/). So every `every` steps, and after the
last, the policy answers the same seeded training tasks greedily. A probe at least as good as the best becomes the
best (its checkpoint is saved and never pruned); one below the best by more than `tolerance` brings the best
checkpoint's weights and optimizer back, and GRPO goes on from there with the prompts that come next.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from transformers import PreTrainedModel

from mcprl.training.checkpoint import TrainState, checkpoint_dir, restore_policy
from mcprl.training.config import GuardConfig

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
