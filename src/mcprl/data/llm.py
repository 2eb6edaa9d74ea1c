"""LLM-proposed tasks: a model writes a user task and a tool plan; the servers decide if it is kept.

For each request the model sees the live tool inventory of a few servers and the constraints
(complexity, call budget), and answers with structured output (`PLAN_SCHEMA`). Every plan is then
executed; a plan that fails (unknown tool, bad arguments, tool error, unresolvable placeholder) is
dropped with its reason, and a kept task takes its `tool_sequence` and `answer` from what the tools
returned, never from what the model claimed.

Works with any OpenAI-compatible endpoint (`OPENAI_BASE_URL`, `OPENAI_API_KEY`), through
chat.completions or the Responses API. Endpoints without json_schema support fall back to JSON mode
plus validation, feeding each validation error back for another attempt. Replies are cached on disk
by a hash of (model, mode, messages, schema), so a re-run is free and gives the same dataset.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jsonschema
from rich.console import Console
from rich.markup import escape

from mcprl.data.execute import (
    COMPLEXITIES,
    COMPLEXITY_RULES,
    Dropped,
    ExecutionResult,
    Generated,
    PlaceholderError,
    build_sample,
    execute_plan,
    expert_trajectory,
    infer_complexity,
    server_tools,
)
from mcprl.errors import McprlError
from mcprl.protocol.prompt import Style
from mcprl.redact import redact
from mcprl.servers.registry import ADMIN_TOOLS
from mcprl.tools.manager import ToolInfo, ToolManager

Backend = Literal["chat", "responses"]
_MIN_CALLS = {"simple": 1, "medium": 2, "complex": 3}  # complex with 3 calls needs 3 servers
SCHEMA_NAME = "task_plan"
MAX_ANSWER_CHARS = 300
MAX_ANSWER_ITEMS = 20

# Strict structured outputs need closed objects, so free-form arguments travel as a JSON string.
PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["user_task", "steps", "answer"],
    "properties": {
        "user_task": {"type": "string", "description": "What the user asks, self-contained, no tool names."},
        "steps": {
            "type": "array",
            "description": "The tool calls that solve the task, in order.",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["server", "tool", "arguments"],
                "properties": {
                    "server": {"type": "string"},
                    "tool": {"type": "string"},
                    "arguments": {"type": "string", "description": "JSON object of arguments, as a string."},
                },
            },
        },
        "answer": {
            "type": ["string", "null"],
            "description": "Where the final answer comes from, e.g. '{{step2.data.close}}'; null for action tasks.",
        },
    },
}

_RULES = """You design tasks for training an AI agent that uses tools. Propose ONE realistic task a user \
could ask, and the exact tool calls that solve it.
Rules:
- Use only the listed servers and tools, with arguments that fit their parameters and concrete values \
the tools accept (real tickers, dates, ids, channel names...).
- steps: the calls in order, each {"server", "tool", "arguments"}; "arguments" is a JSON object written \
as a string, e.g. "{\\"ticker\\": \\"AAPL\\"}".
- A later call may use an earlier result with a placeholder: "{{step1.data.FIELD}}" (paths: .key, [0] \
for list items, [-1] for the last). A placeholder that is the whole string keeps its type.
- answer: the final answer as a template over results, e.g. "{{step2.data.close}}" or \
"{{step1.data.name}} ({{step1.data.symbol}})"; null only when the task is an action with nothing to \
report (e.g. posting a message).
- user_task: natural, self-contained, never names tools or servers, and needs the calls to be answered.
Reply with the JSON object only."""


class LLMError(McprlError):
    """A generation run that cannot go on (bad config, key, model or endpoint); the message says the fix."""


class PlanReplyError(McprlError, ValueError):
    """A model reply that is not a usable plan; its message is fed back to the model."""


@dataclass
class LLMConfig:
    """Knobs of the LLM generator (the CLI exposes each as an option and an env var)."""

    model: str = "gpt-4o-mini"  # OPENAI_MODEL
    backend: Backend = "chat"  # OPENAI_BACKEND: chat.completions or the Responses API
    base_url: str | None = None  # None: OPENAI_BASE_URL, else api.openai.com
    n_samples: int = 100  # N_SAMPLES: tasks requested (kept <= requested)
    seed: int = 0  # picks each request's complexity, servers and focus tool
    max_tools: int = 4  # MAX_TOOLS: most calls in one plan
    max_turns: int = 8  # MAX_TURNS: the episode's turn budget (calls + answer must fit)
    domains: list[str] | None = None  # DOMAINS: servers to draw tasks from; None: all
    complexities: list[str] = field(default_factory=lambda: list(COMPLEXITIES))  # COMPLEXITIES
    style: Style = "hermes"  # tool-call style taught by the sample's system prompt
    concurrency: int = 4  # requests (and plan executions) in flight at once
    attempts: int = 3  # replies per task; an invalid reply or a wrong result path is fed back
    retries: int = 4  # extra tries of a request on timeout, connection error, 429 or 5xx
    backoff_s: float = 1.0  # exponential backoff base between those tries
    timeout_s: float = 60.0  # per request
    tool_timeout_s: float = 20.0  # per tool call of a plan
    temperature: float = 0.8
    cache_dir: Path | None = Path(".cache/llm")  # None disables the reply cache

    def __post_init__(self) -> None:
        bad = [c for c in self.complexities if c not in COMPLEXITIES]
        if bad or not self.complexities:
            raise LLMError(f"unknown complexities {bad or '(none)'}; use some of: {', '.join(COMPLEXITIES)}")
        if self.backend not in ("chat", "responses"):
            raise LLMError(f"unknown backend {self.backend!r}; use chat or responses")
        if self.max_tools < 1 or self.n_samples < 0 or self.concurrency < 1 or self.attempts < 1:
            raise LLMError("max_tools, concurrency and attempts must be >= 1 and n_samples >= 0")
        for c in self.complexities:
            low = _MIN_CALLS[c]
            if low > self.max_tools or low + 1 > self.max_turns:
                raise LLMError(f"complexity {c!r} needs {low} calls, which does not fit max_tools={self.max_tools} "
                               f"and max_turns={self.max_turns} (calls + 1 answer turn); raise them or drop {c!r}")


@dataclass(frozen=True)
class TaskRequest:
    index: int
    complexity: str
    servers: tuple[str, ...]
    focus: str  # a tool the plan must use, so requests spread over the inventory


@dataclass(frozen=True)
class Plan:
    user_task: str
    steps: list[dict[str, Any]]  # [{server, tool, params}], params may hold placeholders
    answer: str | None  # a template over step results


def plan_requests(tools: list[ToolInfo], cfg: LLMConfig) -> list[TaskRequest]:
    """The n requests of a run, fixed by the seed: complexities in turn, servers and focus tool drawn."""
    available = list(dict.fromkeys(t.server for t in tools))
    unknown = sorted(set(cfg.domains or ()) - set(available))
    if unknown:
        raise LLMError(f"unknown domains {unknown}: the servers with tools are {', '.join(available)}")
    servers = [s for s in available if not cfg.domains or s in cfg.domains]
    if not servers:
        raise LLMError("no server exposes any tool; check the servers config")
    if "complex" in cfg.complexities and cfg.max_tools < 4 and len(servers) < 3:
        raise LLMError(f"complex tasks need 4 calls (max_tools={cfg.max_tools}) or 3 servers (have "
                       f"{', '.join(servers)}); raise MAX_TOOLS, add DOMAINS or drop 'complex'")
    requests = []
    for k in range(cfg.n_samples):
        rng = random.Random(f"{cfg.seed}:{k}")
        complexity = cfg.complexities[k % len(cfg.complexities)]
        count = min(len(servers), _server_count(complexity, rng, cfg.max_tools, len(servers)))
        chosen = set(rng.sample(servers, count))
        picked = tuple(s for s in servers if s in chosen)
        focus = rng.choice([t for t in tools if t.server in chosen])
        requests.append(TaskRequest(k, complexity, picked, f"{focus.server}.{focus.tool}"))
    return requests


def _server_count(complexity: str, rng: random.Random, max_tools: int, available: int) -> int:
    if complexity == "simple":
        return 1
    if complexity == "medium":
        return rng.choice((1, 2))
    return 3 if max_tools < 4 else rng.choice((2, 3)) if available >= 3 else 2


def request_messages(req: TaskRequest, tools: list[ToolInfo], cfg: LLMConfig) -> list[dict[str, str]]:
    inventory = "\n\n".join(f"Server {s}:\n" + "\n".join(_tool_line(t) for t in tools if t.server == s)
                            for s in req.servers)
    user = (f"Task request #{req.index} (seed {cfg.seed}).\n"
            f"Complexity: {req.complexity}: {COMPLEXITY_RULES[req.complexity]}, at most {cfg.max_tools} calls; "
            f"the agent has {cfg.max_turns} turns (calls + final answer).\n"
            f"Servers: {', '.join(req.servers)}. One of the calls must be {req.focus}.\n\n{inventory}")
    return [{"role": "system", "content": _RULES}, {"role": "user", "content": user}]


def _tool_line(t: ToolInfo) -> str:
    props: dict[str, Any] = t.input_schema.get("properties", {})
    required = set(t.input_schema.get("required", []))
    params = ", ".join(f"{name}{'' if name in required else '?'}: {_param_type(schema)}"
                       for name, schema in props.items())
    summary = " ".join(t.description.split())[:240]
    return f"- {t.tool}({params}): {summary}"


def _param_type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "|".join(json.dumps(v) for v in schema["enum"])
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return "|".join(_param_type(o) for o in options if o.get("type") != "null")
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list[{_param_type(schema.get('items', {}))}]"
    default = f"={json.dumps(schema['default'])}" if "default" in schema else ""
    return f"{'|'.join(kind) if isinstance(kind, list) else kind}{default}"


_FENCE = re.compile(r"^\s*```[A-Za-z]*\s*|\s*```\s*$")
_PLAN_VALIDATOR = jsonschema.Draft202012Validator(PLAN_SCHEMA)


def parse_plan(text: str, req: TaskRequest, cfg: LLMConfig) -> Plan:
    """A reply as a plan that fits the request, or PlanReplyError saying what to fix."""
    try:
        raw = json.loads(_FENCE.sub("", text or ""))
    except json.JSONDecodeError as e:
        raise PlanReplyError(f"the reply is not valid JSON ({e.msg} at char {e.pos})") from None
    if isinstance(raw, dict) and raw.get("refusal"):
        raise PlanReplyError(f"the model refused ({str(raw['refusal'])[:200]}); propose a different, harmless task")
    errors = sorted(_PLAN_VALIDATOR.iter_errors(raw), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        listed = "; ".join(f"at {'/'.join(str(p) for p in e.absolute_path) or '(top level)'}: {e.message}"
                           for e in errors[:5])
        raise PlanReplyError(f"the reply does not match the schema: {listed}")
    steps = []
    for i, step in enumerate(raw["steps"], start=1):
        try:
            params = json.loads(step["arguments"] or "{}")
        except json.JSONDecodeError as e:
            raise PlanReplyError(f"steps[{i}].arguments is not a JSON object string ({e.msg})") from None
        if not isinstance(params, dict):
            raise PlanReplyError(f"steps[{i}].arguments must encode a JSON object, got {type(params).__name__}")
        if step["server"] not in req.servers:
            raise PlanReplyError(f"steps[{i}] uses server {step['server']!r}; use only {', '.join(req.servers)}")
        steps.append({"server": step["server"], "tool": step["tool"], "params": params})
    n_servers = len({s["server"] for s in steps})
    if not 1 <= len(steps) <= min(cfg.max_tools, cfg.max_turns - 1):
        raise PlanReplyError(f"the plan has {len(steps)} steps; use 1 to {min(cfg.max_tools, cfg.max_turns - 1)}")
    if infer_complexity(len(steps), n_servers) != req.complexity:
        raise PlanReplyError(f"{len(steps)} calls on {n_servers} server(s) is not a {req.complexity} task: "
                             f"{req.complexity} means {COMPLEXITY_RULES[req.complexity]}")
    answer = raw["answer"]
    if answer is not None and "{{step" not in answer:
        raise PlanReplyError("answer must take its value from a result, e.g. '{{step1.data.FIELD}}', or be null")
    if not raw["user_task"].strip():
        raise PlanReplyError("user_task is empty")
    return Plan(raw["user_task"].strip(), steps, answer)


class ReplyCache:
    """Model replies on disk, one JSON file per request hash; writes are atomic renames."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @staticmethod
    def key(**parts: Any) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> str | None:
        path = self._path(key)
        return json.loads(path.read_text(encoding="utf-8"))["reply"] if path.is_file() else None

    def put(self, key: str, reply: str) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"reply": reply}, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)


class PlanClient:
    """One structured-output request at a time per call, with retries, JSON-mode fallback and the cache."""

    def __init__(self, cfg: LLMConfig, client: Any = None, console: Console | None = None) -> None:
        self.cfg = cfg
        self.client = client or _openai_client(cfg)
        self.console = console or Console(stderr=True)
        self.cache = ReplyCache(cfg.cache_dir) if cfg.cache_dir else None
        self._mode_key = ReplyCache.key(model=cfg.model, backend=cfg.backend, probe="json_schema")
        cached_mode = self.cache.get(self._mode_key) if self.cache else None
        self.mode = cached_mode or "json_schema"

    async def complete(self, messages: list[dict[str, str]]) -> str:
        import openai

        while True:
            mode = self.mode
            sent = messages if mode == "json_schema" else _json_mode(messages)
            key = ReplyCache.key(model=self.cfg.model, mode=mode, messages=sent, schema=PLAN_SCHEMA)
            cached = self.cache.get(key) if self.cache else None
            if cached is not None:
                return cached
            try:
                reply = await self._with_retries(sent, mode)
            except (openai.BadRequestError, openai.UnprocessableEntityError) as e:
                if mode != "json_schema":
                    raise
                self._fall_back(e)
                continue
            if self.cache:
                self.cache.put(key, reply)
            return reply

    def _fall_back(self, error: Exception) -> None:
        if self.mode == "json_schema":
            self.console.print(f"[yellow]the endpoint rejected json_schema output ({escape(_short(error))}); "
                               "using JSON mode + validation[/yellow]")
        self.mode = "json_object"
        if self.cache:
            self.cache.put(self._mode_key, "json_object")

    async def _with_retries(self, messages: list[dict[str, str]], mode: str) -> str:
        import openai
        from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

        transient = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)
        retrying = AsyncRetrying(stop=stop_after_attempt(self.cfg.retries + 1),
                                 wait=wait_exponential(multiplier=self.cfg.backoff_s, max=30),
                                 retry=retry_if_exception_type(transient), reraise=True)
        async for attempt in retrying:
            with attempt:
                return await self._send(messages, mode)
        raise AssertionError("unreachable")

    async def _send(self, messages: list[dict[str, str]], mode: str) -> str:
        schema_format = {"name": SCHEMA_NAME, "schema": PLAN_SCHEMA, "strict": True}
        if self.cfg.backend == "responses":
            fmt = {"type": "json_schema", **schema_format} if mode == "json_schema" else {"type": "json_object"}
            resp = await self.client.responses.create(model=self.cfg.model, input=messages, text={"format": fmt},
                                                      temperature=self.cfg.temperature)
            return resp.output_text or ""
        response_format = ({"type": "json_schema", "json_schema": schema_format} if mode == "json_schema"
                           else {"type": "json_object"})
        resp = await self.client.chat.completions.create(model=self.cfg.model, messages=messages,
                                                         response_format=response_format,
                                                         temperature=self.cfg.temperature)
        message = resp.choices[0].message
        if getattr(message, "refusal", None):
            return json.dumps({"refusal": message.refusal})
        return message.content or ""


def _json_mode(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """JSON mode cannot enforce a schema, so the schema goes into the instructions (and is validated after)."""
    head, *rest = messages
    schema = json.dumps(PLAN_SCHEMA, separators=(",", ":"))
    instructions = f"{head['content']}\nThe JSON object must match this JSON schema:\n{schema}"
    return [{"role": head["role"], "content": instructions}, *rest]


def _openai_client(cfg: LLMConfig) -> Any:
    import openai

    try:
        return openai.AsyncOpenAI(base_url=cfg.base_url, timeout=cfg.timeout_s, max_retries=0)
    except openai.OpenAIError as e:
        raise LLMError("OPENAI_API_KEY is not set: export it (any placeholder works for a local endpoint "
                       "that checks no key) and OPENAI_BASE_URL for a non-OpenAI endpoint") from e


def _short(error: Exception) -> str:
    return str(redact(str(error)))[:200]


async def generate_llm(tm: ToolManager, cfg: LLMConfig, *, client: Any = None,
                       console: Console | None = None) -> Generated:
    """Request `cfg.n_samples` plans, execute each, keep those that ran; output is in request order."""
    console = console or Console(stderr=True)
    await tm.start()
    tools = server_tools(tm, {t.server for t in tm.tools()})
    requests = plan_requests(tools, cfg)
    planner = PlanClient(cfg, client, console)
    sem = asyncio.Semaphore(cfg.concurrency)

    async def one(req: TaskRequest) -> tuple[Plan, ExecutionResult, Any] | Dropped:
        async with sem:
            outcome = await _generate_one(tm, planner, req, tools, cfg)
        if isinstance(outcome, Dropped):
            console.print(f"[yellow]dropped[/yellow] #{req.index} ({outcome.stage}): {escape(outcome.reason)}")
        return outcome

    try:
        async with asyncio.TaskGroup() as group:
            futures = [group.create_task(one(r)) for r in requests]
    except* LLMError as eg:
        raise eg.exceptions[0] from None
    finally:
        if client is None:
            await planner.client.close()
    return _assemble(tm, requests, [f.result() for f in futures], cfg, console)


async def _generate_one(tm: ToolManager, planner: PlanClient, req: TaskRequest, tools: list[ToolInfo],
                        cfg: LLMConfig) -> tuple[Plan, ExecutionResult, Any] | Dropped:
    """Ask, validate, execute. An invalid reply, or a placeholder/answer path that the real results do
    not have (the model cannot see output shapes), is fed back for another attempt; other failures drop."""
    import openai

    messages = request_messages(req, tools, cfg)
    failure = Dropped(req.index, "reply", "no attempt made")
    for _ in range(cfg.attempts):
        try:
            reply = await planner.complete(messages)
        except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as e:
            raise LLMError(f"the endpoint refused model {cfg.model!r}: {_short(e)}; check OPENAI_API_KEY, "
                           "OPENAI_BASE_URL and OPENAI_MODEL") from None
        except openai.APIError as e:
            return Dropped(req.index, "llm", f"request failed after {cfg.retries + 1} tries: "
                                             f"{type(e).__name__}: {_short(e)}")
        try:
            plan = parse_plan(reply, req, cfg)
        except PlanReplyError as e:
            failure = Dropped(req.index, "reply", f"no valid plan in {cfg.attempts} attempts; last error: {e}")
            messages = _retry(messages, reply, f"That reply is invalid: {e}.")
            continue
        admin = [f"{s['server']}.{s['tool']}" for s in plan.steps if s["tool"] in ADMIN_TOOLS.get(s["server"], ())]
        if admin:  # never run them: they exist for set-up and would reset state
            return Dropped(req.index, "constraints", f"uses admin tools never offered to agents: {admin}",
                           plan.user_task)
        execution = await execute_plan(tm, plan.steps, timeout=cfg.tool_timeout_s)
        if not execution.ok and execution.error_type != "placeholder":
            return Dropped(req.index, "execution", str(redact(execution.reason)), plan.user_task)
        try:
            if not execution.ok:
                raise PlaceholderError(str(execution.reason))
            return plan, execution, _answer(execution, plan.answer)
        except PlaceholderError as e:
            stage = "answer" if execution.ok else "execution"
            failure = Dropped(req.index, stage, str(redact(str(e))), plan.user_task)
            messages = _retry(messages, reply, f"Running the plan failed: {e}.\n{_results_text(execution)}")
    return failure


def _retry(messages: list[dict[str, str]], reply: str, problem: str) -> list[dict[str, str]]:
    return [*messages, {"role": "assistant", "content": reply},
            {"role": "user", "content": f"{problem}\nReply again with the whole corrected JSON object only."}]


def _results_text(execution: ExecutionResult, max_chars: int = 600) -> str:
    """What the steps that ran returned, so the model can point placeholders at fields that exist."""
    lines = []
    for s in execution.steps:
        data = json.dumps(s.result.get("data"), ensure_ascii=False, separators=(",", ":"))
        lines.append(f"step{s.step} ({s.server}.{s.tool}) returned data: "
                     f"{data[:max_chars]}{'...' if len(data) > max_chars else ''}")
    return "\n".join(lines) or "No step ran."


def _answer(execution: ExecutionResult, template: str | None) -> Any:
    """The answer the tools produced: a scalar or a short list, so that it can be checked."""
    if template is None:
        return None
    value = execution.resolve(template)
    if value is None or value == "" or value == []:
        raise PlaceholderError(f"answer {template!r} resolves to an empty value")
    if isinstance(value, dict):
        raise PlaceholderError(f"answer {template!r} is an object; point it at one field")
    if isinstance(value, list) and (len(value) > MAX_ANSWER_ITEMS or any(isinstance(v, (dict, list)) for v in value)):
        raise PlaceholderError(f"answer {template!r} is a long or nested list; point it at a field")
    if len(json.dumps(value, ensure_ascii=False)) > MAX_ANSWER_CHARS:
        raise PlaceholderError(f"answer {template!r} is over {MAX_ANSWER_CHARS} characters")
    return value


def _assemble(tm: ToolManager, requests: list[TaskRequest], outcomes: list[Any], cfg: LLMConfig,
              console: Console) -> Generated:
    out = Generated([], [], [])
    seen: set[str] = set()
    for req, outcome in zip(requests, outcomes):
        if isinstance(outcome, Dropped):
            out.dropped.append(outcome)
            continue
        plan, execution, answer = outcome
        norm = " ".join(plan.user_task.lower().split())
        if norm in seen:
            out.dropped.append(Dropped(req.index, "duplicate", "same user task as an earlier kept one", plan.user_task))
            continue
        seen.add(norm)
        servers = sorted({s.server for s in execution.steps})
        extra = {"generator": "llm", "model": cfg.model, "backend": cfg.backend, "seed": cfg.seed,
                 "index": req.index, "plan": plan.steps, "answer_template": plan.answer}
        sample = build_sample(f"llm-{cfg.seed}-{req.index:05d}", plan.user_task, execution, answer=answer,
                              allowed=server_tools(tm, servers), data_source=f"llm/{'+'.join(servers)}",
                              max_turns=cfg.max_turns, style=cfg.style, extra_info=extra)
        out.samples.append(sample)
        out.experts.append(expert_trajectory(sample, execution, style=cfg.style))
    console.print(f"kept {len(out.samples)} of {len(requests)} tasks ({len(out.dropped)} dropped)")
    return out
