"""The trajectory record written by `mcprl eval` and training (one JSON object per line).

The models are permissive on purpose: optional fields get defaults and unknown keys are kept,
so older or richer rows still load; only fields the analytics cannot do without are required.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcprl.eval.errors import RunDirError, TrajectoryFormatError

TurnKind = Literal["tool_call", "answer", "malformed", "none"]
COMPLEXITIES = ("simple", "medium", "complex")


class ToolResult(BaseModel):
    model_config = ConfigDict(extra="allow")

    ok: bool
    error: str | None = None
    error_type: str | None = None


class Turn(BaseModel):
    model_config = ConfigDict(extra="allow")

    action: str = ""
    kind: TurnKind
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    result: ToolResult | None = None
    reward: float = 0.0


class Trajectory(BaseModel):
    model_config = ConfigDict(extra="allow")

    task_id: str
    sample_idx: int = 0
    data_source: str = "unknown"
    complexity: str = "unknown"
    family: str | None = None  # the task's template (rules) or data source: see SkyRLSample.family
    input_prompt: list[dict[str, Any]] = Field(default_factory=list)
    output_response: str = ""
    turns: list[Turn] = Field(default_factory=list)
    score: list[float] = Field(default_factory=list)
    reward: float = 0.0
    success: bool
    answered: bool = False
    answer_correct: bool | None = None
    stop_reason: str = "stop"
    env_extras: dict[str, Any] = Field(default_factory=dict)
    prompt_tokens: int = 0
    response_tokens: int = 0
    num_turns: int | None = None

    @property
    def tool_calls(self) -> list[Turn]:
        return [t for t in self.turns if t.kind == "tool_call"]

    @property
    def n_turns(self) -> int:
        return self.num_turns if self.num_turns is not None else len(self.turns)

    def overflowed(self, max_input_tokens: int | None = None) -> bool:
        """Ran out of context: reported as such, or cut by length with the context full."""
        if self.stop_reason == "context_overflow":
            return True
        return (
            self.stop_reason == "length"
            and max_input_tokens is not None
            and self.prompt_tokens + self.response_tokens >= max_input_tokens
        )


TrajectoryLike = Trajectory | Mapping[str, Any]


def sort_groups(names: Iterable[str]) -> list[str]:
    """Complexities in difficulty order, then anything else alphabetically."""
    order = {c: i for i, c in enumerate(COMPLEXITIES)}
    return sorted(names, key=lambda g: (order.get(g, len(order)), g))


def as_trajectories(rows: Iterable[TrajectoryLike]) -> list[Trajectory]:
    """Validate rows (dicts or models) into `Trajectory` objects, naming the first bad row."""
    out = []
    for i, row in enumerate(rows):
        if isinstance(row, Trajectory):
            out.append(row)
            continue
        try:
            out.append(Trajectory.model_validate(row))
        except ValidationError as err:
            task = row.get("task_id", "?") if isinstance(row, Mapping) else "?"
            raise TrajectoryFormatError(
                f"trajectory #{i} (task_id={task!r}) does not match the format in docs/evaluation.md: "
                f"{_first_error(err)}"
            ) from err
    return out


def load_trajectories(path: Path) -> list[Trajectory]:
    """Read a trajectories.jsonl file, or the one inside an eval directory."""
    path = Path(path)
    if path.is_dir():
        path = path / "trajectories.jsonl"
    if not path.is_file():
        raise RunDirError(f"no trajectories file at {path}; run `mcprl eval run` first or pass the eval directory")
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise TrajectoryFormatError(f"{path}:{lineno} is not valid JSON ({err.msg})") from err
    try:
        return as_trajectories(rows)
    except TrajectoryFormatError as err:
        raise TrajectoryFormatError(f"{path}: {err}") from err


def dump_trajectories(trajectories: Sequence[Trajectory], path: Path) -> None:
    with Path(path).open("w") as f:
        for traj in trajectories:
            f.write(json.dumps(traj.model_dump(mode="json")) + "\n")


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "row"
    return f"{where}: {first['msg']}"
