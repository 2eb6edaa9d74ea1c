"""OpenEnvEnv (`env_class: openenv_env`): any OpenEnv environment server, trained and evaluated in mcprl.

One episode is one OpenEnv session (one WebSocket). `init` resets it with the row's `reset_kwargs` and, for
an MCP environment, lists its tools and writes them into the system prompt in mcprl's call format; each
`step` parses the model's turn with mcprl's parser and sends `call_tool` (an `<answer>` goes to the
server's answer tool, if it has one). Rewards and done come from the server: the environment's owner
decides what success is. Environments without MCP tools get the turn through an action template.
Like `mcp_tool_env` it never raises: a transport failure becomes an error observation.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from mcprl.envs.config import OpenEnvConfig
from mcprl.envs.mcp_env import COUNTERS, _plain
from mcprl.tools.openenv import OpenEnvError, OpenEnvSession, StepResult, http_url
from mcprl.protocol.parsing import parse_action
from mcprl.protocol.prompt import call_example, system_prompt, tool_response
from mcprl.rewards.ground_truth import json_mapping, positive_int

log = logging.getLogger(__name__)
ANSWER_TOOLS = ("answer", "submit", "submit_answer", "submit_final_answer")
DEFAULT_MAX_TURNS = 5
# OpenEnv's ToolErrorType -> the env's counters (mcp_tool_env's names)
_ERROR_COUNTER = {"tool_not_found": "unknown_tool", "invalid_args": "invalid_arguments", "timeout": "tool_timeouts"}


class _Tool:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.name, self.description, self.input_schema = spec["name"], spec["description"], spec["input_schema"]


class OpenEnvEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.cfg = OpenEnvConfig.from_any(_plain(env_config))
        extras = dict(extras or {})
        info, truth = _mapping(extras.get("extra_info")), _mapping(_mapping(extras.get("reward_spec")).get("ground_truth"))
        self.url = info.get("openenv_url") or self.cfg.url
        self.reset_kwargs = dict(info.get("reset_kwargs") or extras.get("reset_kwargs") or {})
        self._task_id = str(truth.get("task_id") or info.get("task_id") or "openenv")
        limits = [t for t in (self.cfg.max_turns, positive_int(truth.get("max_turns"))) if t]
        self.max_turns = min(limits) if limits else DEFAULT_MAX_TURNS
        self.session: OpenEnvSession | None = None
        self.tools: list[dict[str, Any]] = []
        self.answer_tool: dict[str, Any] | None = None
        self.action_template: dict[str, Any] | None = None
        self.trace: list[dict[str, Any]] = []
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.answered = self.success = False
        self.episode_reward = 0.0
        self.idle_turns = 0
        self.stop_reason: str | None = None
        self.failure: str | None = None  # why the session could not start

    @property
    def task_id(self) -> str:
        return self._task_id

    def init(self, prompt: list[dict[str, str]]) -> tuple[list[dict[str, str]], dict[str, Any]]:
        try:
            if not self.url:
                raise OpenEnvError("openenv_env needs a server: rollout.openenv.url or the row's extra_info.openenv_url",
                                   "CONFIG")
            self.session = OpenEnvSession(self.url, connect_timeout_s=self.cfg.connect_timeout_s,
                                          message_timeout_s=self.cfg.message_timeout_s)
            reset = self.session.reset(**self.reset_kwargs)
            self._discover()
        except OpenEnvError as exc:
            self.failure = str(exc)
            log.warning("task %s: %s", self.task_id, exc)
            return list(prompt), {"task_id": self.task_id, "openenv_error": self.failure}
        return self._prompt(prompt, reset), {"task_id": self.task_id, "max_turns": self.max_turns}

    def _discover(self) -> None:
        assert self.session is not None
        try:
            specs = self.session.list_tools()
        except OpenEnvError as exc:
            if exc.code in ("TRANSPORT", "TIMEOUT"):
                raise
            self.action_template = self.cfg.action or _template_from_schema(self.url or "")
            return
        wanted = ANSWER_TOOLS if self.cfg.answer_tool == "auto" else (self.cfg.answer_tool,) if self.cfg.answer_tool else ()
        self.answer_tool = next((t for name in wanted for t in specs if t["name"] == name), None)
        self.tools = [t for t in specs if t is not self.answer_tool]

    def _prompt(self, prompt: list[dict[str, str]], reset: StepResult) -> list[dict[str, str]]:
        """The row's messages with the server's tools in the system prompt; the server's own task text (an
        mcprl server's `question`) where the row has no user message."""
        messages = [dict(m) for m in prompt]
        meta = reset.metadata or {}
        if not any(m["role"] == "user" for m in messages):
            question = meta.get("question") or _text(reset.observation)
            messages.append({"role": "user", "content": str(question)})
        if self.action_template is not None:
            return messages
        tools = system_prompt([_Tool(t) for t in self.tools], answer_tag=self.cfg.answer_tag)
        system = next((m for m in messages if m["role"] == "system"), None)
        if system is None:
            return [{"role": "system", "content": tools}] + messages
        system["content"] = f"{system['content']}\n\n{tools}"
        return messages

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        action = action if isinstance(action, str) else str(action)
        parsed = parse_action(action, answer_tag=self.cfg.answer_tag, formats=self.cfg.formats)
        entry: dict[str, Any] = {"action": action, "kind": parsed.kind, "tool": parsed.name,
                                 "arguments": parsed.arguments, "result": None, "answer_correct": None}
        reward, done, observation, meta = 0.0, False, None, {}
        if self.session is None or self.session.closed:
            observation = tool_response({"ok": False, "error": f"environment unavailable: {self.failure or 'closed'}"})
            done, self.stop_reason = True, "error"
        elif self.action_template is not None:
            text = parsed.answer if parsed.kind == "answer" else action.strip()
            reward, done, observation, meta = self._send(_fill(self.action_template, str(text)), entry)
        elif parsed.kind == "tool_call":
            reward, done, observation, meta = self._send({"type": "call_tool", "tool_name": parsed.name,
                                                          "arguments": parsed.arguments or {}}, entry)
        elif parsed.kind == "answer":
            self.answered = True
            if self.answer_tool is not None:
                first = next(iter(self.answer_tool["input_schema"].get("properties") or {"answer": {}}))
                reward, _, observation, meta = self._send({"type": "call_tool", "tool_name": self.answer_tool["name"],
                                                           "arguments": {first: parsed.answer}}, entry, count=False)
            done = True
        elif parsed.kind == "malformed":
            self.counts["malformed"] += 1
            observation = tool_response({"ok": False, "error": f"malformed tool call: {parsed.error}. "
                                                               f"Use {call_example('hermes')}"})
        else:
            self.counts["no_action"] += 1
            observation = (f"No tool call or final answer found. Call a tool with {call_example('hermes')} "
                           f"or answer with <{self.cfg.answer_tag}>...</{self.cfg.answer_tag}>.")
        self.episode_reward += reward
        self.success = self.success or reward >= self.cfg.success_reward or bool(meta.get("task_complete"))
        self.idle_turns = self.idle_turns + 1 if parsed.kind == "none" else 0
        if done and self.stop_reason is None:
            self.stop_reason = "answered" if parsed.kind == "answer" else "solved" if self.success else "env_done"
        elif not done:
            self.stop_reason = self._limit()
            done = self.stop_reason is not None
        if entry["kind"] == "answer":
            entry["answer_correct"] = self.success
        self.trace.append(entry | {"reward": reward})
        observations = [] if done or observation is None else [{"role": self.cfg.observation_role,
                                                                 "content": observation}]
        return BaseTextEnvStepOutput(observations=observations, reward=reward, done=done,
                                     metadata={"task_id": self.task_id, "turn": self.turns, "kind": parsed.kind,
                                               "tool": parsed.name, "stop_reason": self.stop_reason,
                                               "task_complete": self.success, "openenv": meta})

    def _limit(self) -> str | None:
        if self.turns >= self.max_turns:
            return "max_turns"
        if self.cfg.max_idle_turns is not None and self.idle_turns >= self.cfg.max_idle_turns:
            return "idle"
        return None

    def _send(self, action: dict[str, Any], entry: dict[str, Any],
              count: bool = True) -> tuple[float, bool, str, dict[str, Any]]:
        """One step on the server: (reward, done, what the model reads, the reply's metadata)."""
        assert self.session is not None
        try:
            reply = self.session.step(action)
        except OpenEnvError as exc:
            entry["result"] = {"ok": False, "error": str(exc), "error_type": "transport_error"}
            self.counts["tool_calls"] += count
            self.counts["tool_errors"] += count
            if self.session.closed:
                self.stop_reason = "error"
            return 0.0, self.session.closed, tool_response({"ok": False, "error": f"environment error: {exc}"}), {}
        obs = reply.observation
        error = obs.get("error") if isinstance(obs.get("error"), dict) else None
        if action.get("type") == "call_tool":
            result = {"ok": error is None, **({"error": error.get("message"), "error_type": error.get("error_type")}
                                              if error else {"data": _result_data(obs.get("result"))})}
            if count:
                self.counts["tool_calls"] += 1
                key = "tool_ok" if error is None else _ERROR_COUNTER.get(str(error.get("error_type")), "tool_errors")
                self.counts[key] += 1
        else:
            result = {"ok": True, "data": _text(obs)}
        entry["result"] = {k: result.get(k) for k in ("ok", "error", "error_type")}
        text = tool_response(result, self.cfg.max_observation_chars)
        return float(reply.reward or 0.0), reply.done, text, reply.metadata

    def close(self) -> None:
        if self.session is not None:
            self.session.close()

    def get_metrics(self) -> dict[str, Any]:
        return {**self.counts, "turns": self.turns, "answered": self.answered, "success": self.success,
                "episode_reward": self.episode_reward, "task_id": self.task_id, "trace": self.trace,
                "stop_reason": self.stop_reason, **({"openenv_error": self.failure} if self.failure else {})}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        from mcprl.envs.mcp_env import MCPToolEnv

        return MCPToolEnv.aggregate_metrics(metrics)


def _mapping(value: Any) -> dict[str, Any]:
    """A row field as a mapping: SkyRL's parquet rows hand them over as JSON text; a broken one counts as empty."""
    try:
        return json_mapping(value, "row field")
    except ValueError:
        return {}


def _result_data(result: Any) -> Any:
    """What a tool returned, from OpenEnv's CallToolResult shape (`data`, else the text content)."""
    if not isinstance(result, dict):
        return result
    if result.get("data") is not None:
        return result["data"]
    texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict)]
    return "\n".join(texts) if texts else result


def _text(observation: dict[str, Any]) -> str:
    """A non-MCP observation as text: its fields but metadata, reward and done."""
    fields = {k: v for k, v in observation.items() if k not in ("metadata", "reward", "done")}
    if len(fields) == 1:
        value = next(iter(fields.values()))
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return json.dumps(fields, ensure_ascii=False, default=str)


def _fill(template: dict[str, Any], text: str) -> dict[str, Any]:
    return {k: text if v == "{text}" else v for k, v in template.items()}


def _template_from_schema(url: str) -> dict[str, Any]:
    """`{"<first string field of the action schema>": "{text}"}`, from the server's `/schema`."""
    import httpx

    try:
        schema = httpx.get(f"{http_url(url)}/schema", timeout=10.0).json().get("action") or {}
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise OpenEnvError(f"{url}: no MCP tools and no readable /schema ({exc}); set rollout.openenv.action",
                           "CONFIG") from None
    props = schema.get("properties") or {}
    field = next((k for k in schema.get("required", []) if (props.get(k) or {}).get("type") == "string"), None) or \
        next((k for k, v in props.items() if k != "metadata" and (v or {}).get("type") == "string"), None)
    if field is None:
        raise OpenEnvError(f"{url}: its action schema has no string field for the model's text; "
                           "set rollout.openenv.action", "CONFIG")
    return {field: "{text}"}
