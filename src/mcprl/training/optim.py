"""The optimizer and learning-rate schedule both phases train with (the Tinker engine reads the same schedule)."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch

from mcprl.training.config import LRSchedule
from mcprl.training.policy import Policy


def optimizer_for(policy: Policy, lr: float, weight_decay: float, warmup: int, total: int,
                  schedule: LRSchedule = "constant") -> tuple[torch.optim.Optimizer, Any]:
    # fused: one kernel for all parameters; a full fine-tune's step fell from 0.30 s to 0.06 s on 2 CPU cores
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=lr, weight_decay=weight_decay, fused=True)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, partial(lr_factor, warmup=warmup, total=total,
                                                               schedule=schedule))


def lr_factor(step: int, *, warmup: int, total: int, schedule: LRSchedule = "constant") -> float:
    """The learning rate at optimizer step `step` as a share of the configured one."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))
    return 1.0
