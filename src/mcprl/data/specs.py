"""Multi-turn conversation specs -> compact samples (`mcprl data generate specs --in FILE`).

Input: JSONL (or a JSON list), one spec per line::

    {"id": "q1",
     "conversation": [
       {"role": "user", "content": "What did AAPL close at?"},
       {"role": "assistant", "content": "", "tool_calls": [{"name": "get_quote", "arguments": {"ticker": "AAPL"}}]},
       {"role": "tool", "name": "get_quote", "content": "{\\"close\\": 187.42}"},
       {"role": "assistant", "content": "<answer>187.42</answer>"}],
     "answer": 187.42, "complexity": "simple", "data_source": "my_specs"}

`tool_calls` may also be OpenAI-style (`{"function": {"name", "arguments": "<json string>"}}`); a
name is `tool` or `server.tool` and is resolved against the live inventory. The first user message
becomes the prompt; the answer is `answer` when present (null: an action task), else the last
assistant message (the text inside <answer> tags when it has them). `--verify` re-executes the calls
and drops specs whose calls fail or whose recorded tool results differ from the live ones.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from mcprl.data.execute import (
    COMPLEXITIES,
    Dropped,
    ExecutionResult,
    Generated,
    StepResult,
    build_sample,
    execute_plan,
    expert_trajectory,
    server_tools,
)
from mcprl.data.sample import iter_rows
from mcprl.errors import McprlError
from mcprl.protocol.prompt import Style
from mcprl.tools.errors import ToolNotFound
from mcprl.tools.manager import ToolManager

_ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"^\s*<tool_response>\s*(.*?)\s*</tool_response>\s*$", re.DOTALL)


class SpecError(McprlError, ValueError):
    """A spec row that cannot become a sample; the message names the field."""


@dataclass(frozen=True)
class Spec:
    id: str
    user_task: str
    calls: list[tuple[str, dict[str, Any]]]  # (name, arguments) in order
    recorded: list[str | None]  # the tool message answering each call, when the conversation has one
    answer: Any
    complexity: str | None
    data_source: str | None


def parse_spec(row: dict[str, Any], row_number: int) -> Spec:
    if not isinstance(row, dict):
        raise SpecError(f"a spec must be a JSON object, got {type(row).__name__}")
    conversation = row.get("conversation")
    if not isinstance(conversation, list) or not conversation:
        raise SpecError("'conversation' must be a non-empty list of messages")
    user_task, calls, tool_messages = None, [], []
    for i, msg in enumerate(conversation):
        if not isinstance(msg, dict) or msg.get("role") not in ("system", "user", "assistant", "tool"):
            raise SpecError(f"conversation[{i}] must be a message with role user, assistant, tool or system")
        if msg["role"] == "user" and user_task is None:
            user_task = _text(msg.get("content")).strip()
        elif msg["role"] == "assistant":
            calls += [_call(tc, f"conversation[{i}].tool_calls[{j}]")
                      for j, tc in enumerate(msg.get("tool_calls") or [])]
        elif msg["role"] == "tool":
            tool_messages.append((len(calls), _text(msg.get("content"))))
    if not user_task:
        raise SpecError("the conversation has no user message with text")
    if not calls:
        raise SpecError("the conversation makes no tool call; a task needs at least one")
    complexity = row.get("complexity")
    if complexity is not None and complexity not in COMPLEXITIES:
        raise SpecError(f"complexity {complexity!r} is not one of {', '.join(COMPLEXITIES)}")
    # The k-th tool message after the k-th call answers it.
    recorded: list[str | None] = [None] * len(calls)
    for k, (calls_before, content) in enumerate(tool_messages):
        if k < len(calls) and calls_before > k:
            recorded[k] = content
    answer = row["answer"] if "answer" in row else _final_text(conversation)
    spec_id = row.get("id")
    return Spec(id=str(spec_id) if spec_id not in (None, "") else f"spec-{row_number}", user_task=user_task,
                calls=calls, recorded=recorded, answer=answer, complexity=complexity,
                data_source=row.get("data_source"))


def _text(content: Any) -> str:
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _call(tc: Any, where: str) -> tuple[str, dict[str, Any]]:
    fn = tc.get("function") if isinstance(tc, dict) and isinstance(tc.get("function"), dict) else tc
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise SpecError(f"{where} needs a 'name' (or 'function': {{'name', 'arguments'}})")
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise SpecError(f"{where}.arguments is not valid JSON ({e.msg})") from None
    args = {} if args is None else args
    if not isinstance(args, dict):
        raise SpecError(f"{where}.arguments must be a JSON object, got {type(args).__name__}")
    return fn["name"], args


def _final_text(conversation: list[dict[str, Any]]) -> str | None:
    last = conversation[-1]
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    text = _text(last.get("content")).strip()
    tagged = _ANSWER_TAG.search(text)
    return (tagged.group(1).strip() if tagged else text) or None


async def convert_specs(tm: ToolManager, path: str | Path, *, verify: bool = False, style: Style = "hermes",
                        max_turns: int = 8, console: Console | None = None) -> Generated:
    """Convert every spec in `path`; specs that cannot be converted (or verified) are dropped with a reason."""
    console = console or Console(stderr=True)
    await tm.start()
    out = Generated([], [], [])
    seen: set[str] = set()
    for row_number, row in iter_rows(path):
        outcome = await _convert_one(tm, row, row_number, seen, verify=verify, style=style,
                                     max_turns=max_turns, source=Path(path).name)
        if isinstance(outcome, Dropped):
            console.print(f"[yellow]dropped[/yellow] row {row_number} ({outcome.stage}): {escape(outcome.reason)}")
            out.dropped.append(outcome)
            continue
        sample, execution = outcome
        out.samples.append(sample)
        if execution is not None:
            out.experts.append(expert_trajectory(sample, execution, style=style))
    console.print(f"converted {len(out.samples)} specs ({len(out.dropped)} dropped)")
    return out


async def _convert_one(tm: ToolManager, row: Any, row_number: int, seen: set[str], *, verify: bool, style: Style,
                       max_turns: int, source: str) -> tuple[Any, ExecutionResult | None] | Dropped:
    if isinstance(row, Exception):
        return Dropped(row_number, "spec", str(row))
    try:
        spec = parse_spec(row, row_number)
        infos = [tm.resolve(name) for name, _ in spec.calls]
    except (SpecError, ToolNotFound) as e:
        return Dropped(row_number, "spec", str(e))
    if spec.id in seen:
        return Dropped(row_number, "spec", f"duplicate id {spec.id!r}", spec.user_task)
    for k, (info, (_, args)) in enumerate(zip(infos, spec.calls), start=1):
        errors = sorted(info.validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        if errors:
            return Dropped(row_number, "spec", f"call {k} {info.name}: invalid arguments: {errors[0].message}",
                           spec.user_task)
    if verify:
        execution = await execute_plan(tm, [{"tool": info.name, "params": args}
                                            for info, (_, args) in zip(infos, spec.calls)])
        if not execution.ok:
            return Dropped(row_number, "verify", str(execution.reason), spec.user_task)
        for step, recorded in zip(execution.steps, spec.recorded):
            if recorded is not None and not same_result(recorded, step.result):
                return Dropped(row_number, "verify", f"call {step.step} {step.name}: the recorded result differs "
                                                     f"from the live one ({recorded[:80]!r})", spec.user_task)
    else:
        steps = tuple(StepResult(k, info.name, info.server, info.tool, args, _recorded_result(text))
                      for k, (info, (_, args), text) in enumerate(zip(infos, spec.calls, spec.recorded), start=1))
        execution = ExecutionResult(steps)
    seen.add(spec.id)
    servers = sorted({info.server for info in infos})
    sample = build_sample(spec.id, spec.user_task, execution, answer=spec.answer,
                          allowed=server_tools(tm, servers),
                          data_source=spec.data_source or f"specs/{'+'.join(servers)}",
                          max_turns=max_turns,
                          complexity=spec.complexity, style=style,
                          extra_info={"generator": "specs", "spec_id": spec.id, "source": source,
                                      "verified": verify})
    has_results = verify or all(text is not None for text in spec.recorded)
    return sample, execution if has_results else None


def _recorded_result(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    body = _unwrap(text)
    try:
        return {"ok": True, "data": json.loads(body)}
    except ValueError:
        return {"ok": True, "data": body}


def _unwrap(text: str) -> str:
    wrapped = _TOOL_RESPONSE.match(text)
    return wrapped.group(1) if wrapped else text.strip()


def same_result(recorded: str, result: dict[str, Any]) -> bool:
    """Whether a recorded tool message says what a live call returned (as JSON, or as whitespace-normalised text)."""
    if not result.get("ok"):
        return False
    live, body = result.get("data"), _unwrap(recorded)
    try:
        if json.loads(body) == live:
            return True
    except ValueError:
        pass
    live_text = live if isinstance(live, str) else json.dumps(live, ensure_ascii=False)
    return " ".join(body.split()) == " ".join(live_text.split())
