"""What a training engine implements, so that a new one (Tinker, say) is one module and one registry line.

An engine takes the checked `TrainConfig` and a `RunRequest` (the command line's flags), says what it
would do without loading a model (`plan`, for `--dry-run`), and runs. Flags it cannot honour are a
`ConfigError` raised before any work, from either method.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from mcprl.training.config import TrainConfig


@dataclass(frozen=True)
class RunRequest:
    resume: bool = False  # continue from the run's latest checkpoint
    resume_from: Path | None = None  # continue from this checkpoint (e.g. the warm start)
    sft_only: bool = False  # stop after SFT


class TrainEngine(Protocol):
    name: str

    def plan(self, cfg: TrainConfig, request: RunRequest) -> str:
        """What a run would do; loads no model (`mcprl train --dry-run`)."""
        ...

    def run(self, cfg: TrainConfig, request: RunRequest) -> None:
        """Train as the config says, writing the run directory (metrics.jsonl, checkpoints, summary.json)."""
        ...


def critic_lines(cfg: TrainConfig) -> dict[str, str]:
    """The dry run's `critic:` line when the estimator trains one (PPO's GAE), else nothing."""
    from mcprl.training.config import CRITIC_ESTIMATORS

    if cfg.algo.advantage_estimator not in CRITIC_ESTIMATORS:
        return {}
    from mcprl.training.critic import critic_plan

    return {"critic": critic_plan(cfg)}
