"""Greedy probes on a seeded few training tasks of each family, the measure experimental.probe and
experimental.guard both take of the policy (its sampled rewards can rise while its greedy answers fall)."""

from __future__ import annotations

import random
from pathlib import Path

from mcprl.data.sample import SkyRLSample
from mcprl.training.config import TrainConfig
from mcprl.training.policy import Policy
from mcprl.training.rollout import episode_progress, write_rollouts
from mcprl.training.run import console


def tasks_per_family(tasks: list[SkyRLSample], k: int, rng: random.Random) -> list[SkyRLSample]:
    families: dict[str, list[SkyRLSample]] = {}
    for task in tasks:
        families.setdefault(task.family, []).append(task)
    return [t for name in sorted(families) for t in rng.sample(families[name], min(k, len(families[name])))]


def greedy_successes(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], run_dir: Path,
                     name: str) -> list[bool]:
    """One greedy episode per task; the episodes go to rollouts/<name>.jsonl."""
    with episode_progress(name, len(tasks), console) as on_episode:
        result = policy.rollouts.run(tasks, 1, policy.rollouts.sampling(0.0), on_episode)
    if cfg.logging.rollouts:
        write_rollouts(run_dir / "rollouts" / f"{name}.jsonl", [result])
    return [bool(r["success"]) for r in result.trajectories]
