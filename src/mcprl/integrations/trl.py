"""TRL's `GRPOTrainer(environment_factory=...)` over any OpenEnv MCP server, mcprl's `openenv serve` first.

TRL builds one instance per rollout with no arguments, calls `reset(**dataset_row)` (a returned string
joins the prompt), and offers every public method but `reset` as a tool, its JSON schema read from the
type hints and the Google-style docstring (`transformers.utils.get_json_schema`). So the class made here
has exactly one method per server tool, with a signature and docstring built from the tool's JSON
schema, and keeps everything else private. Each call is an episode step on the server: `reward` and
`done` follow the server's replies; `episode_reward` is the reward function for `reward_funcs`.

    from mcprl.integrations.trl import environment_factory, episode_reward
    trainer = GRPOTrainer(model=..., train_dataset=rows, reward_funcs=[episode_reward],
                          environment_factory=environment_factory("http://127.0.0.1:8000"))

Nested schemas lose detail: an object or array parameter is typed `dict` or `list`, as TRL can express it.
"""

from __future__ import annotations

import functools
import inspect
import json
import keyword
import operator
from typing import Any

import httpx

from mcprl.tools.openenv import OpenEnvError, OpenEnvSession, http_url

_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                           "object": dict}


def environment_factory(url: str, *, timeout_s: float = 60.0) -> type:
    """A TRL environment class for the OpenEnv server at `url`; its tools are read once, now, from `/mcp`."""
    tools = _list_tools(url, timeout_s)
    namespace: dict[str, Any] = {"_url": url, "_timeout_s": timeout_s, "__doc__": f"OpenEnv tools at {url}."}
    for tool in tools:
        name = tool["name"]
        if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_") or name == "reset" \
                or name in _OpenEnvTools.__dict__:
            raise OpenEnvError(f"tool {name!r} cannot be a method name for TRL", "CONFIG")
        namespace[name] = _tool_method(tool)
    return type("OpenEnvTools", (_OpenEnvTools,), namespace)


def episode_reward(environments: list[Any], **_: Any) -> list[float]:
    """TRL reward function: each completion's episode reward, as its environment's server scored it."""
    return [float(env.reward) for env in environments]


class _OpenEnvTools:
    _url: str
    _timeout_s: float

    def __init__(self) -> None:
        self._session: OpenEnvSession | None = None
        self.reward = 0.0
        self.done = False

    def reset(self, **row: Any) -> str | None:
        """A new episode: the row's `reset_kwargs` (or its `task_id` / `index` / `seed`) choose the task;
        the server's question, if it sends one, joins the prompt."""
        if self._session is not None:
            self._session.close()
        self._session = OpenEnvSession(self._url, message_timeout_s=self._timeout_s)
        kwargs = dict(row.get("reset_kwargs") or {k: row[k] for k in ("task_id", "index", "seed") if k in row})
        reply = self._session.reset(**kwargs)
        self.reward, self.done = 0.0, False
        question = (reply.metadata or {}).get("question")
        return str(question) if question else None

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._session is None:
            raise RuntimeError("reset() first")
        if self.done:
            raise RuntimeError("the episode is over")
        reply = self._session.call_tool(name, {k: v for k, v in arguments.items() if v is not None})
        self.reward += reply.reward or 0.0
        self.done = reply.done
        error = reply.observation.get("error")
        if error:  # TRL turns an exception into the tool message {"error": ...}
            raise RuntimeError(f"{error.get('error_type')}: {error.get('message')}")
        result = reply.observation.get("result") or {}
        texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict)]
        if texts:
            return "\n".join(texts)
        return "done: the episode is over" if self.done else json.dumps(result.get("data"), ensure_ascii=False, default=str)

    def __del__(self) -> None:
        if getattr(self, "_session", None) is not None:
            self._session.close()


def _list_tools(url: str, timeout_s: float) -> list[dict[str, Any]]:
    try:
        reply = httpx.post(f"{http_url(url)}/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": 1},
                           timeout=timeout_s).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise OpenEnvError(f"cannot list the tools at {url}: {type(exc).__name__}: {exc}") from None
    if "error" in reply or not isinstance((reply.get("result") or {}).get("tools"), list):
        raise OpenEnvError(f"{url}: tools/list failed: {reply.get('error')}", "NOT_MCP")
    return [{"name": t["name"], "description": t.get("description") or "",
             "input_schema": t.get("input_schema") or t.get("inputSchema") or {}} for t in reply["result"]["tools"]]


def _tool_method(tool: dict[str, Any]) -> Any:
    """A method `name(self, a: T, b: U | None = None) -> str` whose docstring has an `Args:` line per parameter."""
    name, schema = tool["name"], tool["input_schema"]
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    for pname in sorted(props, key=lambda p: p not in required):  # required first: Python's rule
        kind = _hint(props[pname] or {})
        optional = pname not in required
        annotations[pname] = kind | None if optional else kind
        params.append(inspect.Parameter(pname, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=None if optional else inspect.Parameter.empty,
                                        annotation=annotations[pname]))

    def method(self: _OpenEnvTools, *args: Any, **kwargs: Any) -> str:
        bound = signature.bind(self, *args, **kwargs)
        return self._call(name, {k: v for k, v in bound.arguments.items() if k != "self"})

    signature = inspect.Signature(params, return_annotation=str)
    args = "\n".join(f"    {p}: {_one_line((props[p] or {}).get('description') or p)}" for p in props)
    method.__name__ = method.__qualname__ = name
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    method.__doc__ = f"{_one_line(tool['description']) or name}\n\nArgs:\n{args}\n\nReturns:\n    The tool's result." \
        if props else f"{_one_line(tool['description']) or name}\n\nReturns:\n    The tool's result."
    return method


def _hint(schema: dict[str, Any]) -> Any:
    """The Python type TRL turns back into this JSON schema, as near as a type hint can say it."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "array":
        return list[_hint(schema.get("items") or {})]  # type: ignore[misc]
    if kind is None and (schema.get("anyOf") or schema.get("oneOf")):
        options = [_hint(o) for o in schema.get("anyOf") or schema.get("oneOf") if o.get("type") != "null"]
        return options[0] if len(options) == 1 else functools.reduce(operator.or_, options) if options else str
    return _TYPES.get(str(kind), str)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
