"""A task's ground truth, read once and leniently from a dataset row's `reward_spec`.

SkyRL hands the env `reward_spec` as a mapping or, from parquet, as JSON text, and a user's row can be
anything. The env must never raise, so `GroundTruth.read` never does: what cannot be read becomes an
empty ground truth plus a `problem` line (the episode still runs and says why it cannot be scored), and
fields of the wrong type become their defaults. Rewards receive `data`, the plain mapping (the wire
format `RewardFn.reset` documents); the env reads the typed fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GroundTruth:
    data: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None  # why the row's ground truth could not be read; None when it could

    @classmethod
    def read(cls, extras: dict[str, Any]) -> GroundTruth:
        try:
            spec = json_mapping(extras.get("reward_spec"), "reward_spec")
            return cls(json_mapping(spec.get("ground_truth"), "reward_spec.ground_truth"))
        except ValueError as err:
            return cls({}, str(err))

    @property
    def task_id(self) -> str:
        value = self.data.get("task_id")
        return "" if value is None else str(value)

    @property
    def max_turns(self) -> int | None:
        return positive_int(self.data.get("max_turns"))

    @property
    def allowed_tools(self) -> list[str]:
        tools = self.data.get("allowed_tools")
        return [str(t) for t in tools] if isinstance(tools, (list, tuple)) else []

    @property
    def complexity(self) -> str | None:
        value = self.data.get("complexity")
        return value if isinstance(value, str) else None


def json_mapping(value: Any, where: str) -> dict[str, Any]:
    """A row field SkyRL hands over as a mapping or (from parquet) JSON text; {} when empty; ValueError
    naming `where` when it is neither."""
    if value is None or value == "":
        return {}
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where} is not valid JSON ({err.msg} at char {err.pos})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping, got {type(value).__name__}")
    return dict(value)


def positive_int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 1 else None
