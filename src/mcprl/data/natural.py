"""Hand-written held-out tasks: questions people would type, about the held-out companies only.

An agent trained on the rule generator's tasks learned its templates rather than the tools, so a test set
made by the same templates cannot show it. These questions are written by hand (data/heldout/natural.yaml)
in varied words and registers. What is not written by hand is the ground truth: every plan is executed on
fresh offline servers and each answer is read from the results, so a typo in the YAML fails the build
instead of becoming a wrong answer. The samples have the rule generator's shape, so every evaluator reads
them as it reads rule tasks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from mcprl.data.execute import on_offline_servers
from mcprl.data.families import path_value
from mcprl.data.rules import TICKER_KEYS, GenerationError, printed_number
from mcprl.data.sample import SkyRLSample, write_samples
from mcprl.episode import new_episode
from mcprl.errors import McprlError
from mcprl.protocol.prompt import system_prompt
from mcprl.rewards.answers import answer_matches
from mcprl.servers.slack import ADMIN_TOOLS
from mcprl.tools.manager import ToolInfo, ToolManager

SPEC_PATH = Path("data/heldout/natural.yaml")
OUT_PATH = Path("data/heldout/natural.jsonl")
SPLIT = "natural"
STYLES = ("ticker", "name", "short", "none")
_REQUIRED = ("id", "family", "style", "question", "plan", "answer")


class NaturalTaskError(McprlError, RuntimeError):
    """A hand-written task that its own plan does not answer: fix the YAML, never keep the task."""

    def __init__(self, task_id: str, message: str) -> None:
        super().__init__(f"{task_id}: {message}")
        self.task_id = task_id


def load_spec(path: str | Path = SPEC_PATH) -> list[dict[str, Any]]:
    """The tasks of the YAML, checked for the fields a build needs (so a slip fails here, named)."""
    tasks = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(tasks, list):
        raise ValueError(f"{path}: expected a list of tasks, got {type(tasks).__name__}")
    seen: set[str] = set()
    for i, task in enumerate(tasks, start=1):
        task_id = str(task.get("id", f"#{i}")) if isinstance(task, dict) else f"#{i}"
        if not isinstance(task, dict):
            raise NaturalTaskError(task_id, "a task must be a mapping")
        missing = [k for k in _REQUIRED if k not in task]
        if missing:
            raise NaturalTaskError(task_id, f"missing {', '.join(missing)}")
        if task_id in seen:
            raise NaturalTaskError(task_id, "duplicate id")
        seen.add(task_id)
        if task["style"] not in STYLES:
            raise NaturalTaskError(task_id, f"style {task['style']!r} is not one of {', '.join(STYLES)}")
        if not task["plan"] or not all(isinstance(s, dict) and {"server", "tool", "params"} <= set(s)
                                       for s in task["plan"]):
            raise NaturalTaskError(task_id, "plan must be a non-empty list of {server, tool, params}")
    return tasks


def complexity(plan: list[dict[str, Any]]) -> str:
    """simple: one call; complex: 4+ calls, or 3+ calls over 2+ servers; medium: the rest."""
    n, servers = len(plan), len({s["server"] for s in plan})
    if n == 1:
        return "simple"
    return "complex" if n >= 4 or (servers >= 2 and n >= 3) else "medium"


def entities(task: dict[str, Any]) -> list[str]:
    """The tickers a task is about: as given, else those its calls name, in order of first use."""
    if "entities" in task:
        return list(task["entities"])
    named = (str(s["params"][k]).upper() for s in task["plan"] for k in TICKER_KEYS if k in s["params"])
    return list(dict.fromkeys(named))


def answer_of(task: dict[str, Any], results: list[Any]) -> Any:
    """The task's answer, taken from its executed results as the spec's `answer` says."""
    spec, task_id = task["answer"], task["id"]
    if spec is None:
        return None

    def data_of(step: Any) -> Any:
        if not isinstance(step, int) or not 1 <= step <= len(results):
            raise NaturalTaskError(task_id, f"answer step {step!r} is not a step of the plan (1..{len(results)})")
        return results[step - 1]

    if "value" in spec:
        _check_highest(task_id, spec, task["plan"], data_of)
        return spec["value"]
    data = data_of(spec.get("step"))
    if spec.get("stdout"):
        try:
            return printed_number(data)
        except (GenerationError, ValueError) as e:
            raise NaturalTaskError(task_id, f"step {spec['step']}: {e}") from None
    try:
        value = path_value(data, str(spec["path"]))
    except GenerationError:
        raise NaturalTaskError(task_id, f"answer path {spec['path']!r} is missing in step {spec['step']}'s result: "
                                        f"{str(data)[:300]}") from None
    if "pattern" not in spec:
        return value
    found = re.search(spec["pattern"], str(value))
    if not found:
        raise NaturalTaskError(task_id, f"pattern {spec['pattern']!r} not found in {str(value)[:300]!r}")
    text = found.group(1)
    try:
        return float(text)
    except ValueError:
        return text


def _check_highest(task_id: str, spec: dict[str, Any], plan: list[dict[str, Any]], data_of: Any) -> None:
    """A literal ticker answer (a comparison) must be the ticker of the step whose value is highest."""
    if "highest" not in spec:
        return
    scores = {}
    for ref in spec["highest"]:
        params = plan[ref["step"] - 1]["params"] if 1 <= ref["step"] <= len(plan) else {}
        ticker = next((str(params[k]).upper() for k in TICKER_KEYS if k in params), None)
        try:
            scores[ticker] = path_value(data_of(ref["step"]), ref["path"])
        except GenerationError:
            raise NaturalTaskError(task_id, f"path {ref['path']!r} is missing in step {ref['step']}") from None
    best = max(scores, key=lambda t: scores[t])
    if best != spec["value"]:
        raise NaturalTaskError(task_id, f"answer {spec['value']!r}, but the highest is {best!r}: {scores}")


def _check_post(task: dict[str, Any], answer: Any) -> list[dict[str, Any]]:
    """The required post as `must_call_with`; it must be a call of the plan and show the answer it reports."""
    post = task.get("must_post")
    if post is None:
        return []
    want = {"channel": post["channel"], "text": post["text"]}
    if not any(s["tool"] == "post_message" and s["params"] == want for s in task["plan"]):
        raise NaturalTaskError(task["id"], f"must_post {want} is not a post_message call of the plan")
    if answer is not None and not answer_matches(post["text"], answer):
        raise NaturalTaskError(task["id"], f"the post {post['text']!r} does not show the answer {answer!r}")
    return [{"tool": "post_message", "params": want}]


def sample_of(task: dict[str, Any], answer: Any, tools: list[ToolInfo]) -> SkyRLSample:
    """The task as a rule-generator-shaped SkyRL sample (only the id, split and data source differ)."""
    plan = task["plan"]
    servers = sorted({s["server"] for s in plan})
    allowed = [t for t in tools if t.server in servers and t.tool not in ADMIN_TOOLS]
    success: dict[str, Any] = {"must_call_tool": plan[0]["tool"],
                               "must_call_tools": list(dict.fromkeys(s["tool"] for s in plan))}
    must_call_with = _check_post(task, answer)
    if must_call_with:
        success["must_call_with"] = must_call_with
    gt = {"task_id": task["id"], "complexity": complexity(plan),
          "max_turns": len(plan) + 3,  # room for one failed call and its fix
          "success": success,
          "tool_sequence": [{"step": i, "server": s["server"], "tool": s["tool"], "params": s["params"]}
                            for i, s in enumerate(plan, start=1)],
          "limits": {"max_servers": len(servers), "max_tools": len(plan) + 2}, "answer": answer,
          "allowed_tools": [t.name for t in allowed]}
    prompt = [{"role": "system", "content": system_prompt(allowed)},
              {"role": "user", "content": task["question"]}]
    return SkyRLSample(data_source=f"{SPLIT}/{'+'.join(servers)}", prompt=prompt,
                       reward_spec={"method": "rule", "ground_truth": gt},
                       extra_info={"template": task["family"], "family": task["family"], "style": task["style"],
                                   "entities": entities(task), "split": SPLIT})


async def execute(task: dict[str, Any], tm: ToolManager) -> list[Any]:
    """Run the plan as one episode (its own Slack state, as in the env); the `data` of each step."""
    episode, results = new_episode(), []
    for i, step in enumerate(task["plan"], start=1):
        result = await tm.execute_tool(f"{step['server']}.{step['tool']}", dict(step["params"]), episode=episode)
        if not result.get("ok"):
            raise NaturalTaskError(task["id"], f"step {i} {step['server']}.{step['tool']}({step['params']}) "
                                               f"failed: {result.get('error')}")
        results.append(result["data"])
    return results


async def build_async(spec: list[dict[str, Any]], tm: ToolManager) -> list[SkyRLSample]:
    """Every task of `spec`, executed on `tm`'s servers, as samples in spec order."""
    tools = tm.tools()
    samples = []
    for task in spec:
        results = await execute(task, tm)
        samples.append(sample_of(task, answer_of(task, results), tools))
    return samples


def build(spec_path: str | Path = SPEC_PATH) -> list[SkyRLSample]:
    """The samples of a spec file, on this process's offline servers."""
    spec = load_spec(spec_path)
    return on_offline_servers(lambda tm: build_async(spec, tm))


def write(samples: list[SkyRLSample], out_path: str | Path = OUT_PATH) -> Path:
    return write_samples(samples, out_path)
