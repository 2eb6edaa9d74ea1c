"""Run a tool plan against live servers and turn what it returned into a task's ground truth.

Generators propose plans; only what the servers actually return becomes ground truth, so a
sample's `tool_sequence` and `answer` are always reproducible.

Placeholders let a step (or the answer) use an earlier step's result:

- ``{{stepN}}`` is step N's result data (the tool's output); ``{{stepN.data}}`` is the same.
- ``{{stepN.data.KEY.KEY}}`` walks into it; ``.0`` or ``[0]`` indexes a list, ``[-1]`` from the end.
  The leading ``data`` may be left out: ``{{step1.price}}`` is ``{{step1.data.price}}``.
- A string that is exactly one placeholder takes the value with its JSON type
  (``"{{step1.data.price}}"`` -> ``187.42``); a placeholder inside longer text is formatted into it
  (strings as they are, everything else as compact JSON).
- A step may only refer to steps before it; anything that cannot resolve fails the plan.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from mcprl.data.sample import SkyRLSample
from mcprl.episode import new_episode
from mcprl.errors import McprlError
from mcprl.protocol.prompt import Style, system_prompt, tool_response
from mcprl.servers.registry import ADMIN_TOOLS
from mcprl.tools.config import default_servers_config
from mcprl.tools.errors import ToolNotFound
from mcprl.tools.manager import ToolInfo, ToolManager
from mcprl.tools.sync import shared_tool_manager

COMPLEXITIES = ("simple", "medium", "complex")
_PLACEHOLDER = re.compile(r"\{\{\s*step(\d+)((?:\.[\w\-]+|\[-?\d+\])*)\s*\}\}")
_PATH_PART = re.compile(r"\.([\w\-]+)|\[(-?\d+)\]")
T = TypeVar("T")


def on_offline_servers(work: Callable[[ToolManager], Coroutine[Any, Any, T]]) -> T:
    """Run `work` on this process's offline servers: started once and shared with every later generator and
    env of the process (`shared_tool_manager`), since a start of the five costs seconds, most of it each
    server importing the MCP SDK. Each task runs as its own episode, so what one wrote no other sees."""
    servers = shared_tool_manager(default_servers_config())
    return servers.run(work(servers.manager))


class PlaceholderError(McprlError, ValueError):
    """A placeholder that names a missing step or a path its result does not have."""


@dataclass(frozen=True)
class Dropped:
    """A task a generator gave up on, and why (written to the `.dropped.jsonl` file)."""

    index: int | str  # request number (llm) or spec id / row (specs)
    stage: str  # where it failed: llm, reply, constraints, execution, answer, duplicate, spec, verify
    reason: str
    task: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "stage": self.stage, "reason": self.reason, "task": self.task}


@dataclass
class Generated:
    """What a generator produced: samples, one expert trajectory per sample, and the dropped tasks."""

    samples: list[SkyRLSample]
    experts: list[dict[str, Any]]
    dropped: list[Dropped]


@dataclass(frozen=True)
class StepResult:
    step: int
    name: str  # what the model calls (`tool`, or `server.tool` when two servers share the name)
    server: str
    tool: str
    params: dict[str, Any]  # placeholders resolved: the concrete call
    result: dict[str, Any]  # ToolManager.execute_tool's result

    @property
    def ok(self) -> bool:
        return bool(self.result.get("ok"))


@dataclass(frozen=True)
class ExecutionResult:
    steps: tuple[StepResult, ...] = ()
    failed_step: int | None = None
    reason: str | None = None
    error_type: str | None = None  # placeholder, unknown_tool, invalid_arguments, tool_error, timeout, ...

    @property
    def ok(self) -> bool:
        return self.failed_step is None

    def tool_sequence(self) -> list[dict[str, Any]]:
        return [{"step": s.step, "server": s.server, "tool": s.tool, "params": s.params} for s in self.steps]

    def resolve(self, template: Any) -> Any:
        """Resolve placeholders (e.g. an answer template) against every step that ran."""
        return resolve_placeholders(template, [s.result for s in self.steps])


def step_name(step: dict[str, Any]) -> str:
    """The ToolManager name of a plan step: `server.tool`, or just `tool` when no server is given."""
    tool, server = step.get("tool"), step.get("server")
    if not isinstance(tool, str) or not tool:
        raise ToolNotFound(f"step needs a non-empty 'tool', got {tool!r}")
    return f"{server}.{tool}" if isinstance(server, str) and server and "." not in tool else tool


async def execute_plan(tm: ToolManager, steps: Iterable[dict[str, Any]], *,
                       timeout: float | None = None) -> ExecutionResult:
    """Run `steps` ([{server?, tool, params}]) in order, stopping at the first failure; never raises.

    The plan is one episode (`mcprl.episode`): what it writes, and what it reads back, is its own.
    """
    await tm.start()
    episode = new_episode()
    done: list[StepResult] = []
    for number, step in enumerate(steps, start=1):
        try:
            if not isinstance(step, dict):
                raise ToolNotFound(f"a step must be an object with 'tool' and 'params', got {type(step).__name__}")
            info = tm.resolve(step_name(step))
            params = resolve_placeholders(step.get("params") or {}, [s.result for s in done])
        except ToolNotFound as e:
            return ExecutionResult(tuple(done), number, f"step {number}: {e}", ToolNotFound.kind)
        except PlaceholderError as e:
            return ExecutionResult(tuple(done), number, f"step {number}: {e}", "placeholder")
        result = await tm.execute_tool(info.name, params, timeout, episode=episode)
        done.append(StepResult(number, info.name, info.server, info.tool, params, result))
        if not result.get("ok"):
            error, kind = str(result.get("error", "unknown error"))[:300], result.get("error_type", "tool_error")
            return ExecutionResult(tuple(done), number, f"step {number} {info.name}: {kind}: {error}", kind)
    if not done:
        return ExecutionResult((), 1, "the plan has no steps", "empty_plan")
    return ExecutionResult(tuple(done))


def resolve_placeholders(value: Any, results: list[dict[str, Any]]) -> Any:
    """`value` with every placeholder replaced from `results` (results[0] is step 1)."""
    if isinstance(value, dict):
        return {k: resolve_placeholders(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_placeholders(v, results) for v in value]
    if not isinstance(value, str) or "{{" not in value:
        return value
    whole = _PLACEHOLDER.fullmatch(value.strip())
    if whole:
        return _lookup(whole, results)
    text = _PLACEHOLDER.sub(lambda m: _format(_lookup(m, results)), value)
    if "{{" in text:
        raise PlaceholderError(f"malformed placeholder in {value!r}; write {{{{stepN.data.KEY}}}} "
                               "with .KEY or [INDEX] parts")
    return text


def _lookup(match: re.Match[str], results: list[dict[str, Any]]) -> Any:
    number, path = int(match.group(1)), match.group(2)
    if not 1 <= number <= len(results):
        ran = f"steps 1-{len(results)}" if results else "no steps"
        raise PlaceholderError(f"{match.group(0)} refers to step {number}, but only {ran} ran before it")
    parts: list[str | int] = [key or int(index) for key, index in _PATH_PART.findall(path)]
    if parts and parts[0] == "data":
        parts = parts[1:]
    value = results[number - 1].get("data")
    walked = f"step{number}.data"
    for part in parts:
        value = _child(value, part, walked, match.group(0))
        walked += f"[{part}]" if isinstance(part, int) else f".{part}"
    return value


def _child(value: Any, part: str | int, walked: str, placeholder: str) -> Any:
    if isinstance(value, dict):
        key = str(part)
        if key in value:
            return value[key]
        raise PlaceholderError(f"{placeholder}: {walked} has no key {key!r}; keys: {', '.join(sorted(value)[:20])}")
    if isinstance(value, list):
        try:
            return value[int(part)]
        except (ValueError, IndexError):
            raise PlaceholderError(f"{placeholder}: {walked} is a list of {len(value)}; "
                                   f"index {part!r} is not in it") from None
    kind = "text (truncated or not JSON)" if isinstance(value, str) else type(value).__name__
    raise PlaceholderError(f"{placeholder}: {walked} is {kind}, so it has no {part!r}")


def _format(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def infer_complexity(n_calls: int, n_servers: int = 1) -> str:
    """simple: one call; complex: four or more calls, or calls on three or more servers; medium: between.

    Matches the rule generator's labels on all its templates but one (compare_pe: 3 calls, 2 servers)."""
    if n_calls <= 1:
        return "simple"
    return "complex" if n_calls >= 4 or n_servers >= 3 else "medium"


COMPLEXITY_RULES = {
    "simple": "exactly 1 tool call",
    "medium": "2 or 3 tool calls on 1 or 2 servers",
    "complex": "4 or more tool calls, or calls on 3 or more servers",
}


def server_tools(tm: ToolManager, servers: Iterable[str]) -> list[ToolInfo]:
    """The tools a task may offer: every agent-facing tool of the servers it involves, in inventory order."""
    wanted = set(servers)
    return [t for t in tm.tools() if t.server in wanted and t.tool not in ADMIN_TOOLS.get(t.server, ())]


def ground_truth(task_id: str, execution: ExecutionResult, *, answer: Any, allowed: list[ToolInfo],
                 max_turns: int, complexity: str | None = None) -> dict[str, Any]:
    """Ground truth in the rule generator's conventions: turns = calls + 2 (capped by `max_turns`, never
    below calls + 1), limits from the plan (servers used, calls + 1)."""
    calls = len(execution.steps)
    servers = {s.server for s in execution.steps}
    return {
        "task_id": task_id,
        "complexity": complexity or infer_complexity(calls, len(servers)),
        "max_turns": max(calls + 1, min(max_turns, calls + 2)),
        "success": {"must_call_tool": execution.steps[0].name,
                    "must_call_tools": list(dict.fromkeys(s.name for s in execution.steps)),
                    "answer_required": answer is not None},
        "tool_sequence": execution.tool_sequence(),
        "limits": {"max_servers": len(servers), "max_tools": calls + 1},
        "answer": answer,
        "allowed_tools": [t.name for t in allowed],
    }


def build_sample(task_id: str, user_task: str, execution: ExecutionResult, *, answer: Any, allowed: list[ToolInfo],
                 data_source: str, max_turns: int, complexity: str | None = None, style: Style = "hermes",
                 extra_info: dict[str, Any] | None = None) -> SkyRLSample:
    """A sample whose prompt lists only `allowed` tools and whose ground truth is what `execution` returned."""
    gt = ground_truth(task_id, execution, answer=answer, allowed=allowed, max_turns=max_turns, complexity=complexity)
    prompt = [{"role": "system", "content": system_prompt(allowed, style=style)},
              {"role": "user", "content": user_task}]
    return SkyRLSample(data_source=data_source, prompt=prompt, reward_spec={"method": "rule", "ground_truth": gt},
                       extra_info=extra_info or {})


def expert_trajectory(sample: SkyRLSample, execution: ExecutionResult, *, style: Style = "hermes",
                      observation_role: str = "user") -> dict[str, Any]:
    """The ideal episode for `sample`: each call and its real result, then the answer. An action task
    (no answer) ends with its last call, as the env stops once the calls are made."""
    from mcprl.protocol.parsing import format_answer, format_tool_call

    messages = list(sample.prompt)
    for s in execution.steps:
        messages.append({"role": "assistant", "content": format_tool_call(s.name, s.params, style)})
        messages.append({"role": observation_role, "content": tool_response(s.result)})
    answer = sample.ground_truth["answer"]
    if answer is None:
        messages.pop()
    else:
        messages.append({"role": "assistant", "content": format_answer(_answer_text(answer))})
    return {"task_id": sample.task_id, "messages": messages}


def _answer_text(answer: Any) -> str:
    if isinstance(answer, list):
        return ", ".join(_answer_text(a) for a in answer)
    return _format(answer)
