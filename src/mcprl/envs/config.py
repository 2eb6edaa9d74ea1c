"""Environment settings, from SkyRL's `env_config` (a dict or OmegaConf node) or the training YAML."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal


@dataclass
class EnvConfig:
    servers_config: str | None = None  # servers YAML; None: mcprl's five servers over stdio
    tool_mode: Literal["live", "record", "replay"] = "live"
    recording: str | None = None  # record/replay file
    tool_timeout_s: float = 10.0
    tool_retries: int | None = None  # restarts of an unreachable server per call; None: the servers config's
    tool_allowlist: list[str] | None = None  # only these tools may be called (on top of the task's allowed_tools)
    observation_role: Literal["user", "tool"] = "user"  # "tool" only if the chat template knows the role
    answer_tag: str = "answer"
    formats: tuple[str, ...] = ("hermes", "json", "xml")
    max_turns: int | None = None  # default: the task's ground_truth.max_turns
    # End after this many turns in a row with neither a tool call nor an answer (None: never). Such a
    # model rarely recovers, and its turns are the longest (it talks until max_new_tokens).
    max_idle_turns: int | None = 2
    max_observation_chars: int = 1500
    done_on_success: bool = True  # end as soon as the task's success criteria are met
    reward_fn: str = "heuristic"  # a registered reward (heuristic, llm_judge) or "module:Class" (mcprl.rewards.base)
    reward_weights: dict[str, Any] = field(default_factory=dict)  # HeuristicWeights overrides
    judge: dict[str, Any] = field(default_factory=dict)  # JudgeConfig fields
    reward_options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of a "module:Class" reward
    faults: dict[str, Any] = field(default_factory=dict)  # FaultConfig fields: tool calls that fail on purpose

    @classmethod
    def from_any(cls, raw: Any) -> EnvConfig:
        if isinstance(raw, EnvConfig):
            return raw
        data = dict(raw or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown env_config keys {unknown}; known: {sorted(known)}")
        if "formats" in data:
            data["formats"] = tuple(data["formats"])
        return cls(**data)
