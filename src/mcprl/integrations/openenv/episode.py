"""One OpenEnv session's episode: an `MCPToolEnv` driven by OpenEnv actions instead of model text.

`call_tool` becomes the `<tool_call>` a model would write, and `message` is a model's raw turn, so mcprl's
parser, argument validation, timeouts and shaped reward apply exactly as in training. The synthetic
`answer` tool ends the episode with `<answer>` for trainers that only call tools (TRL's
`environment_factory`). Every payload leaves through `redact`: no secret reaches a reply.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from mcprl.data.sample import SkyRLSample
from mcprl.envs.config import EnvConfig
from mcprl.envs.mcp_env import MCPToolEnv
from mcprl.errors import McprlError, suggest
from mcprl.protocol.parsing import format_answer, format_tool_call
from mcprl.protocol.prompt import tool_result_text
from mcprl.redact import redact
from mcprl.rewards.heuristic import names_match

ANSWER_TOOL = "answer"
ANSWER_SPEC = {
    "name": ANSWER_TOOL,
    "description": "Give the final answer to the user's task; this ends the episode.",
    "input_schema": {"type": "object", "properties": {"answer": {"type": "string", "description": "The final answer"}},
                     "required": ["answer"]},
}
# mcprl's error_type -> OpenEnv's ToolErrorType
ERROR_TYPES = {"unknown_tool": "tool_not_found", "disallowed_tool": "tool_not_found",
               "invalid_arguments": "invalid_args", "timeout": "timeout", "server_error": "transport_error"}


def offered_tools(tools: list[Any], allowlists: list[list[str]]) -> list[dict[str, Any]]:
    """OpenEnv tool specs of the tools every allowlist allows (as the env enforces them), then `answer`."""
    return [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools
            if all(any(names_match(t.name, a) for a in names) for names in allowlists)] + [ANSWER_SPEC]


class EpisodeError(McprlError, ValueError):
    """An action the session cannot take (no episode yet, the episode is over, an unknown task); the
    server sends it as an error frame and the session stays open."""

    exit_code = 2


@dataclass
class Reply:
    """An `observation` frame's data."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False

    def payload(self) -> dict[str, Any]:
        return redact({"observation": self.observation, "reward": self.reward, "done": self.done,
                       "metadata": self.observation.get("metadata", {})})


class TaskPool:
    """The tasks a server offers, picked by `task_id`, row `index`, or a `seed`ed draw."""

    def __init__(self, tasks: list[SkyRLSample]) -> None:
        if not tasks:
            raise EpisodeError("the task file has no rows")
        self.tasks = tasks
        self.by_id = {t.task_id: t for t in tasks}

    def pick(self, task_id: str | None = None, index: int | None = None, seed: int | None = None) -> SkyRLSample:
        if task_id is not None:
            if task_id not in self.by_id:
                hint = suggest(str(task_id), self.by_id)
                raise EpisodeError(f"unknown task_id {task_id!r}{'; ' + hint if hint else ''}")
            return self.by_id[task_id]
        if index is not None:
            if not isinstance(index, int) or not 0 <= index < len(self.tasks):
                raise EpisodeError(f"index {index!r} is not a row of the {len(self.tasks)} tasks")
            return self.tasks[index]
        return random.Random(seed).choice(self.tasks)


class ServedEpisode:
    """reset / step / state of one session; a new `reset` starts a new episode in the same session."""

    def __init__(self, pool: TaskPool, env_config: EnvConfig) -> None:
        self.pool, self.env_config = pool, env_config
        self.env: MCPToolEnv | None = None
        self.episode_id: str | None = None
        self.steps, self.reward_so_far, self.done = 0, 0.0, False
        self.prompt: list[dict[str, str]] = []

    def reset(self, data: dict[str, Any]) -> Reply:
        task = self.pool.pick(data.get("task_id"), data.get("index"), data.get("seed"))
        self.env = MCPToolEnv(self.env_config, {"reward_spec": task.reward_spec, "extra_info": task.extra_info,
                                                "data_source": task.data_source})
        self.prompt, _ = self.env.init(list(task.prompt))
        self.episode_id = str(data.get("episode_id") or self.env.episode)
        self.steps, self.reward_so_far, self.done = 0, 0.0, False
        question = next((m["content"] for m in reversed(self.prompt) if m["role"] == "user"), "")
        return Reply({"metadata": {"prompt": self.prompt, "question": question, "tools": self.tools(),
                                   "task_id": task.task_id, "max_turns": self.env.max_turns,
                                   "episode_id": self.episode_id}})

    def tools(self) -> list[dict[str, Any]]:
        """The task's tools (the servers' tools less those the task or the config does not allow), then `answer`."""
        env = self._live()
        return offered_tools(env.tools.list_tools(), [a for a in (env.truth.allowed_tools, env.cfg.tool_allowlist) if a])

    def step(self, action: dict[str, Any]) -> Reply:
        kind = action.get("type")
        if kind == "list_tools":
            return Reply({"tools": self.tools()})
        if kind == "call_tool":
            name, arguments = action.get("tool_name"), action.get("arguments", {})
            if not isinstance(name, str) or not name:
                raise EpisodeError("call_tool needs a tool_name")
            if not isinstance(arguments, dict):
                return self._refused(name, f"arguments must be an object, not {type(arguments).__name__}")
            if name == ANSWER_TOOL:
                return self._turn(format_answer(arguments.get("answer", ""), self.env_config.answer_tag), name)
            return self._turn(format_tool_call(name, arguments), name)
        if kind == "message":
            content = action.get("content")
            if not isinstance(content, str):
                raise EpisodeError("message needs a string content: the assistant's turn")
            return self._turn(content, None)
        raise EpisodeError(f"unknown action type {kind!r}; use list_tools, call_tool or message")

    def state(self) -> dict[str, Any]:
        env = self.env
        return redact({"episode_id": self.episode_id, "step_count": self.steps,
                       "task_id": env.task_id if env else None, "reward_so_far": self.reward_so_far,
                       "done": self.done, "solved": bool(env and env.success),
                       "stop_reason": env.stop_reason if env else None})

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None

    def _live(self) -> MCPToolEnv:
        if self.env is None:
            raise EpisodeError("no episode yet: send reset first")
        return self.env

    def _turn(self, text: str, tool_name: str | None) -> Reply:
        env = self._live()
        if self.done:
            raise EpisodeError("the episode is over; send reset to start another")
        out = env.step(text)
        self.steps += 1
        self.reward_so_far += float(out["reward"])
        self.done = bool(out["done"])
        meta = {k: v for k, v in out["metadata"].items() if k in ("turn", "kind", "tool", "stop_reason",
                                                                   "reward_components", "task_complete")}
        meta |= {"episode_id": self.episode_id, "reward_so_far": self.reward_so_far}
        if tool_name is None:  # a raw turn: what the model would read next
            content = out["observations"][0]["content"] if out["observations"] else None
            return Reply({"content": content, "metadata": meta}, float(out["reward"]), self.done)
        result = env.last_result
        observation = {"tool_name": tool_name, "result": None, "error": None, "metadata": meta}
        if result is not None and result.get("ok"):
            data = result.get("data")
            observation["result"] = {"content": [{"type": "text", "text": tool_result_text(result, 1 << 20)}],
                                     "structured_content": data if isinstance(data, dict) else None,
                                     "data": data, "is_error": False}
        elif result is not None:
            observation["error"] = {"error_type": ERROR_TYPES.get(result.get("error_type"), "execution_error"),
                                    "message": str(result.get("error", "tool call failed"))}
        elif out["metadata"].get("kind") == "malformed":
            observation["error"] = {"error_type": "invalid_args", "message": "the call could not be parsed"}
        return Reply(observation, float(out["reward"]), self.done)

    def _refused(self, name: str, message: str) -> Reply:
        self._live()
        return Reply({"tool_name": name, "result": None, "error": {"error_type": "invalid_args", "message": message},
                      "metadata": {"episode_id": self.episode_id, "reward_so_far": self.reward_so_far}}, 0.0, self.done)
