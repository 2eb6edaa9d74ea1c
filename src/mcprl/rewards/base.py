"""What a reward is to the env: a `RewardFn` scores each step and, once, the episode's end.

Each instance serves one episode at a time: `reset` starts an episode, `step` scores a turn, `end` adds
a terminal reward when the episode stops (NO_REWARD when there is nothing to add). `registry` builds
one by name or from a `"module:Class"` entry point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from mcprl.protocol.parsing import ParsedAction

# Why an episode ended, as the env reports it in its last step's metadata and metrics: an answer, the
# task's success criteria met (done_on_success), the turn limit, `max_idle_turns` turns without an action,
# the context full (set by the rollout, which sees token counts), an env failure, or the environment's own
# end (an OpenEnv server's done: its owner decides when an episode is over).
StopReason = Literal["answered", "solved", "max_turns", "idle", "context_overflow", "error", "env_done"]
STOP_REASONS: tuple[str, ...] = StopReason.__args__  # type: ignore[attr-defined]
STEP_MIN, STEP_MAX = -1.0, 1.0


@dataclass(frozen=True)
class Step:
    """One turn as the reward sees it: the text, what it parsed as, the tool's result (None without a
    call) and the conversation so far, this turn included."""

    action: str
    parsed: ParsedAction
    result: dict[str, Any] | None
    history: list[dict[str, str]]


@dataclass(frozen=True)
class Reward:
    """A step's reward: the total in [-1, 1], its named parts (they sum to the total) and whether the
    task counts as done."""

    total: float
    components: dict[str, float] = field(default_factory=dict)
    task_complete: bool = False

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Reward:
        return cls(float(raw["total_reward"]), dict(raw.get("components") or {}), bool(raw.get("task_complete")))

    def plus(self, other: Reward) -> Reward:
        """This step's reward with a terminal one added, still within [-1, 1]."""
        total = max(STEP_MIN, min(STEP_MAX, self.total + other.total))
        return Reward(total, {**self.components, **other.components}, self.task_complete or other.task_complete)


NO_REWARD = Reward(0.0)


@runtime_checkable
class RewardFn(Protocol):
    def reset(self, ground_truth: dict[str, Any]) -> None:
        """A new episode of the task with this `reward_spec.ground_truth`."""

    def step(self, step: Step) -> Reward:
        """The reward of one turn."""

    def end(self, reason: StopReason) -> Reward:
        """The terminal reward added to the last step's (NO_REWARD for none)."""


@dataclass(frozen=True)
class RewardSettings:
    """What a reward is built from: the registry name or entry point, the heuristic weights (the judge's
    fallback too), the judge's settings and a custom class's keyword arguments."""

    fn: str = "heuristic"
    weights: dict[str, Any] = field(default_factory=dict)
    judge: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
