"""MCPToolEnv: the skyrl_gym environment where the agent meets MCP tools.

One episode = one task sample. Each `step` parses the model's turn, runs at most one tool call
through the MCPToolGroup (servers are shared per process and started once; every call carries the
episode's id, so a stateful server keeps each episode's state apart), scores it, and returns the tool
result as the next observation. It never raises: one exception inside SkyRL's generator
would abort the whole batch, so every failure becomes an error observation with a penalty.

The reward is whatever `RewardFn` the config names (`mcprl.rewards.base`); the env only tells it each
step and, once, why the episode stopped (`StopReason`, also in the last step's metadata and the
episode's metrics).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from mcprl.envs.config import EnvConfig
from mcprl.envs.tool_group import GROUP_NAME, MCPToolGroup
from mcprl.tools.faults import FaultConfig
from mcprl.episode import new_episode
from mcprl.protocol.parsing import ParsedAction, parse_action
from mcprl.protocol.prompt import call_example, tool_response
from mcprl.rewards.base import Reward, RewardSettings, Step, StopReason
from mcprl.rewards.ground_truth import GroundTruth, json_mapping, positive_int
from mcprl.rewards.registry import build_reward
from mcprl.rewards.heuristic import names_match
from mcprl.tools.config import ServersConfig, load_servers_config
from mcprl.tools.sync import shared_tool_manager

log = logging.getLogger(__name__)
INTERNAL_ERROR_PENALTY = -0.2
COUNTERS = ("tool_calls", "tool_ok", "tool_timeouts", "tool_errors", "unknown_tool", "invalid_arguments",
             "malformed", "no_action", "faults_injected")


class MCPToolEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.cfg = EnvConfig.from_any(_plain(env_config))
        extras = dict(extras or {})
        self.truth = GroundTruth.read(extras)
        if self.truth.problem:
            log.warning("task %r: %s; the episode runs unscored", self.truth.task_id, self.truth.problem)
        self.gt = self.truth.data
        try:
            self.extra_info = json_mapping(extras.get("extra_info"), "extra_info")
        except ValueError:
            self.extra_info = {}
        limits = [t for t in (self.cfg.max_turns, self.truth.max_turns, positive_int(extras.get("max_turns"))) if t]
        self.max_turns = min(limits) if limits else 5
        self.reward_fn = build_reward(RewardSettings(self.cfg.reward_fn, self.cfg.reward_weights, self.cfg.judge,
                                                     self.cfg.reward_options))
        self.reward_fn.reset(self.gt)
        self.tools = shared_tool_manager(servers_config(self.cfg), mode=self.cfg.tool_mode,
                                         recording=self.cfg.recording)
        self.episode = new_episode()
        self.group = MCPToolGroup(self.tools, timeout=self.cfg.tool_timeout_s, episode=self.episode,
                                  faults=FaultConfig(**self.cfg.faults), task=self.task_id)
        self.init_tool_groups([self.group])
        self.history: list[dict[str, str]] = []
        self.trace: list[dict[str, Any]] = []
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.answered = False
        self.success = False
        self.episode_reward = 0.0
        self.idle_turns = 0  # consecutive turns with neither a tool call nor an answer
        self.stop_reason: StopReason | None = None
        self.last_result: dict[str, Any] | None = None  # the last turn's tool result (OpenEnv replies carry it)

    @property
    def task_id(self) -> str:
        return self.truth.task_id

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        self.history = [dict(m) for m in prompt]
        info = {"task_id": self.task_id, "complexity": self.truth.complexity, "max_turns": self.max_turns}
        return prompt, info | ({"ground_truth_problem": self.truth.problem} if self.truth.problem else {})

    def step(self, action: str) -> BaseTextEnvStepOutput:
        try:
            return self._step(action)
        except Exception as e:  # noqa: BLE001 - see module docstring
            log.exception("MCPToolEnv.step failed on task %s", self.task_id)
            self.turns = max(self.turns, 1)
            done = self.turns >= self.max_turns
            if done:
                self.stop_reason = "error"
            message = f"<tool_response>\n{{\"error\": \"environment error: {type(e).__name__}\"}}\n</tool_response>"
            return BaseTextEnvStepOutput(observations=[] if done else [self._message(message)],
                                         reward=INTERNAL_ERROR_PENALTY, done=done,
                                         metadata={"task_id": self.task_id, "env_error": repr(e),
                                                   "stop_reason": self.stop_reason})

    def _step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        action = action if isinstance(action, str) else str(action)
        self.history.append({"role": "assistant", "content": action})
        parsed = parse_action(action, answer_tag=self.cfg.answer_tag, formats=self.cfg.formats)
        result: dict[str, Any] | None = None
        self.last_result = None
        observation = None
        fault = None
        if parsed.kind == "tool_call":
            result = self._call(parsed)
            fault = result.pop("injected_fault", None)
            self.last_result = result
            observation = tool_response(result, self.cfg.max_observation_chars)
        elif parsed.kind == "malformed":
            observation = tool_response({"ok": False, "error": f"malformed tool call: {parsed.error}. "
                                                               f"Use {call_example('hermes')}"})
        elif parsed.kind == "none":
            observation = (f"No tool call or final answer found. Call a tool with {call_example('hermes')} "
                           f"or answer with <{self.cfg.answer_tag}>...</{self.cfg.answer_tag}>.")
        reward = self.reward_fn.step(Step(action, parsed, result, self.history))
        self._count(parsed, result)
        self.counts["faults_injected"] += fault is not None
        self.answered = self.answered or parsed.kind == "answer"
        self.success = self.success or reward.task_complete
        self.episode_reward += reward.total
        self.idle_turns = self.idle_turns + 1 if parsed.kind == "none" else 0
        self.stop_reason = self._stop_reason(parsed)
        done = self.stop_reason is not None
        if done:
            reward = reward.plus(self.reward_fn.end(self.stop_reason))
        self.trace.append({"action": action, "kind": parsed.kind, "tool": parsed.name, "arguments": parsed.arguments,
                           "result": None if result is None else {k: result.get(k) for k in ("ok", "error", "error_type")}
                           | ({"injected_fault": fault} if fault else {}),
                           "reward": reward.total, "answer_correct": _answer_correct(parsed, reward)})
        if observation is not None and not done:
            self.history.append(self._message(observation))
        metadata = {"task_id": self.task_id, "turn": self.turns, "kind": parsed.kind, "tool": parsed.name,
                    "tool_ok": None if result is None else result.get("ok"),
                    "error_type": None if result is None else result.get("error_type"), "injected_fault": fault,
                    "reward_components": reward.components, "task_complete": reward.task_complete,
                    "answered": parsed.kind == "answer", "stop_reason": self.stop_reason}
        observations = [] if done or observation is None else [self._message(observation)]
        return BaseTextEnvStepOutput(observations=observations, reward=float(reward.total), done=done,
                                     metadata=metadata)

    def _stop_reason(self, parsed: ParsedAction) -> StopReason | None:
        """Why this turn ends the episode, or None when it goes on; the first that applies wins."""
        if parsed.kind == "answer":
            return "answered"
        if self.success and self.cfg.done_on_success:
            return "solved"
        if self.turns >= self.max_turns:
            return "max_turns"
        if self.cfg.max_idle_turns is not None and self.idle_turns >= self.cfg.max_idle_turns:
            return "idle"
        return None

    def _call(self, parsed: ParsedAction) -> dict[str, Any]:
        for allowed in (self.truth.allowed_tools, self.cfg.tool_allowlist):
            if allowed and not any(names_match(parsed.name or "", a) for a in allowed):
                return {"ok": False, "error_type": "disallowed_tool",
                        "error": f"tool {parsed.name!r} is not available here; available: {', '.join(allowed)}"}
        return json.loads(self._execute_tool(GROUP_NAME, parsed.name, [parsed.arguments or {}]))

    def _count(self, parsed: ParsedAction, result: dict[str, Any] | None) -> None:
        if parsed.kind == "malformed":
            self.counts["malformed"] += 1
        elif parsed.kind == "none":
            self.counts["no_action"] += 1
        if result is None:
            return
        self.counts["tool_calls"] += 1
        error = result.get("error_type")
        if result.get("ok"):
            self.counts["tool_ok"] += 1
        elif error == "timeout":
            self.counts["tool_timeouts"] += 1
        elif error in ("unknown_tool", "disallowed_tool"):
            self.counts["unknown_tool"] += 1
        elif error == "invalid_arguments":
            self.counts["invalid_arguments"] += 1
        else:
            self.counts["tool_errors"] += 1

    def _message(self, content: str) -> dict[str, str]:
        return {"role": self.cfg.observation_role, "content": content}

    def get_metrics(self) -> dict[str, Any]:
        return {**self.counts, "turns": self.turns, "answered": self.answered, "success": self.success,
                "episode_reward": self.episode_reward, "task_id": self.task_id, "trace": self.trace,
                "stop_reason": self.stop_reason, **({"ground_truth_problem": self.truth.problem}
                                                    if self.truth.problem else {})}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        """Rates over all calls/turns of all episodes (micro-averages), plus per-episode means."""
        if not metrics:
            return {}
        total = {k: sum(m.get(k, 0) for m in metrics) for k in (*COUNTERS, "turns")}
        n, calls, turns = len(metrics), max(total["tool_calls"], 1), max(total["turns"], 1)
        return {
            "tool_calls": total["tool_calls"] / n,
            "tool_success_rate": total["tool_ok"] / calls,
            "tool_timeout_rate": total["tool_timeouts"] / calls,
            "unknown_tool_rate": total["unknown_tool"] / calls,
            "invalid_arguments_rate": total["invalid_arguments"] / calls,
            "injected_fault_rate": total["faults_injected"] / calls,
            "malformed_rate": total["malformed"] / turns,
            "turns": total["turns"] / n,
            "answered": sum(bool(m.get("answered")) for m in metrics) / n,
            "success": sum(bool(m.get("success")) for m in metrics) / n,
        }


def _answer_correct(parsed: ParsedAction, reward: Reward) -> bool | None:
    if parsed.kind != "answer":
        return None
    parts = reward.components
    if "wrong_answer" in parts or "premature_answer" in parts:
        return False
    return True if "solved" in parts or "ungrounded_answer" in parts else None


def servers_config(cfg: EnvConfig) -> ServersConfig:
    """The servers to use, with the env's retry setting applied to every server."""
    servers = load_servers_config(cfg.servers_config)
    if cfg.tool_retries is None:
        return servers
    return ServersConfig(servers=[s.model_copy(update={"retries": cfg.tool_retries}) for s in servers.servers])


def _plain(raw: Any) -> Any:
    """OmegaConf nodes (SkyRL's env_config) become plain containers."""
    if raw is not None and type(raw).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(raw, resolve=True)
    return raw
