"""Where an experimental knob attaches to the GRPO phase, so that the loop runs none of them itself.

A knob is a `GRPOHook` built for one run (training/experimental/); the phase calls every hook at each point,
in the order `experimental.grpo_hooks` lists them. Each method's default leaves the phase as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from mcprl.data.sample import SkyRLSample
from mcprl.training.rollout import RolloutResult

Guide = Callable[[RolloutResult, list[str]], dict[str, Any]]  # a sample batch's rollouts and group ids -> its output


class GRPOHook:
    def prompts(self, tasks: list[SkyRLSample], stream: Iterator[SkyRLSample]) -> Iterator[SkyRLSample]:
        """GRPO's prompt stream over `tasks`, made once a process before the first step (and position n the
        same at every resume)."""
        return stream

    def guide(self, sampling: dict[str, Any]) -> Guide | None:
        """What changes each sample batch's rollouts before dynamic sampling sees them (one hook's at most)."""
        return None

    def begin(self, save: Callable[[], Path]) -> None:
        """Before this process's first GRPO step; `save` writes the current step's checkpoint."""

    def metrics(self, results: list[RolloutResult]) -> dict[str, float]:
        """A step's metrics over its sample batches, logged beside the rollout metrics."""
        return {}

    def after_step(self, optimizer: torch.optim.Optimizer, metrics: dict[str, Any]) -> bool:
        """After a step's update and weight sync, before its `metrics` are logged (the hook may add to them).
        True: save this step's checkpoint."""
        return False
