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
        return _from_any(cls, raw)


@dataclass
class OpenEnvConfig:
    """`openenv_env`: any OpenEnv environment server as an mcprl env (mcprl's call format, SkyRL's generator)."""

    url: str | None = None  # http://HOST:PORT (or ws://HOST:PORT/ws); a row's extra_info.openenv_url wins
    max_turns: int | None = None  # default: the row's max_turns, else 5
    observation_role: Literal["user", "tool"] = "user"
    answer_tag: str = "answer"
    formats: tuple[str, ...] = ("hermes", "json", "xml")
    max_idle_turns: int | None = 2
    max_observation_chars: int = 1500
    connect_timeout_s: float = 10.0
    message_timeout_s: float = 60.0
    # The episode counts as solved when a step's reward reaches this (or the server's metadata says task_complete).
    success_reward: float = 1.0
    # The tool `<answer>X</answer>` calls, with X as its first parameter; auto: the first of answer, submit,
    # submit_answer, submit_final_answer the server offers (none: an answer just ends the episode).
    answer_tool: str | None = "auto"
    # Environments without MCP tools: the step action, with "{text}" standing for the model's turn (its
    # <answer> if it gave one); None: {"<first string field of /schema's action>": "{text}"}.
    action: dict[str, Any] | None = None

    @classmethod
    def from_any(cls, raw: Any) -> OpenEnvConfig:
        return _from_any(cls, raw)


def _from_any(cls: type, raw: Any) -> Any:
    if isinstance(raw, cls):
        return raw
    data = dict(raw or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown env_config keys {unknown}; known: {sorted(known)}")
    if "formats" in data:
        data["formats"] = tuple(data["formats"])
    return cls(**data)
