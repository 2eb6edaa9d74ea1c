"""`mcprl openenv serve`: mcprl's tasks as an OpenEnv environment server (production mode), in starlette.

The endpoints are the ones `openenv validate --url` checks (`/health`, `/metadata`, `/schema`,
`/openapi.json`, `/mcp`) plus the session WebSocket `/ws`; there is no HTTP `/reset` or `/step`
(OpenEnv's production contract). One WebSocket is one session holding one episode at a time
(`episode.py`); HTTP `/mcp` can create a session (`openenv/session/create`) that a WebSocket then attaches
to with `/ws?session_id=...`, which is how openenv's `MCPToolClient` works. Sessions beyond
`max_sessions` get OpenEnv's `CAPACITY_REACHED` error frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from mcprl.envs.config import EnvConfig
from mcprl.envs.mcp_env import servers_config
from mcprl.integrations.openenv.episode import ANSWER_SPEC, EpisodeError, ServedEpisode, TaskPool, offered_tools
from mcprl.tools.openenv import CAPACITY_REACHED
from mcprl.redact import redact
from mcprl.tools.sync import shared_tool_manager

PROTOCOL_VERSION = "1.0.0"  # openenv's own server reports 1.0.0: `openenv validate` reads profile openenv-http/1.x
# JSON-RPC 2.0 error codes
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
ACTION_SCHEMA = {"oneOf": [
    {"type": "object", "properties": {"type": {"const": "list_tools"}}, "required": ["type"]},
    {"type": "object", "properties": {"type": {"const": "call_tool"}, "tool_name": {"type": "string"},
                                      "arguments": {"type": "object"}}, "required": ["type", "tool_name"]},
    {"type": "object", "properties": {"type": {"const": "message"},
                                      "content": {"type": "string", "description": "A raw assistant turn"}},
     "required": ["type", "content"]},
]}
OBSERVATION_SCHEMA = {"type": "object", "properties": {
    "tool_name": {"type": "string"}, "result": {}, "error": {"type": ["object", "null"]},
    "content": {"type": ["string", "null"]}, "tools": {"type": "array"}, "metadata": {"type": "object"},
    "reward": {"type": ["number", "null"]}, "done": {"type": "boolean"}}}
STATE_SCHEMA = {"type": "object", "properties": {
    "episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer"},
    "task_id": {"type": ["string", "null"]}, "reward_so_far": {"type": "number"}, "done": {"type": "boolean"}}}


class CapacityReached(EpisodeError):
    pass


@dataclass
class Session:
    episode: ServedEpisode
    lock: threading.Lock = field(default_factory=threading.Lock)  # one action at a time per session
    attached: bool = False  # a WebSocket holds it
    last_active: float = field(default_factory=time.monotonic)


class Sessions:
    """Every live session; HTTP-created sessions nobody attached to for `idle_timeout_s` are dropped
    when a new one is needed, so a client that vanished cannot hold capacity for ever."""

    def __init__(self, pool: TaskPool, env_config: EnvConfig, max_sessions: int, idle_timeout_s: float = 600.0) -> None:
        self.pool, self.env_config, self.max_sessions, self.idle_timeout_s = pool, env_config, max_sessions, idle_timeout_s
        self.live: dict[str, Session] = {}
        self.lock = threading.Lock()
        self.executor = ThreadPoolExecutor(max_workers=max_sessions + 2, thread_name_prefix="openenv-session")

    def create(self) -> tuple[str, Session]:
        with self.lock:
            now = time.monotonic()
            for sid in [s for s, v in self.live.items() if not v.attached and now - v.last_active > self.idle_timeout_s]:
                self.live.pop(sid).episode.close()
            if len(self.live) >= self.max_sessions:
                raise CapacityReached(f"all {self.max_sessions} sessions are in use (mcprl openenv serve "
                                      f"--max-sessions N raises the cap)")
            sid = str(uuid.uuid4())
            self.live[sid] = session = Session(ServedEpisode(self.pool, self.env_config))
            return sid, session

    def get(self, sid: str) -> Session:
        session = self.live.get(sid)
        if session is None:
            raise EpisodeError(f"unknown session_id {sid!r}")
        return session

    def close(self, sid: str) -> bool:
        with self.lock:
            session = self.live.pop(sid, None)
        if session is not None:
            self.executor.submit(session.episode.close)
        return session is not None

    async def run(self, session: Session, fn: Any, *args: Any) -> Any:
        def call() -> Any:
            with session.lock:
                session.last_active = time.monotonic()
                return fn(*args)

        return await asyncio.get_running_loop().run_in_executor(self.executor, call)


def build_app(pool: TaskPool, env_config: EnvConfig, *, max_sessions: int = 16, name: str = "mcprl",
              idle_timeout_s: float = 600.0) -> Starlette:
    """The server over `pool`'s tasks. The MCP servers start here, once, so a broken servers config fails
    before the first client arrives, and every session shares them (episodes keep their state apart)."""
    tools = shared_tool_manager(servers_config(env_config), mode=env_config.tool_mode, recording=env_config.recording)
    all_tools = offered_tools(tools.list_tools(), [env_config.tool_allowlist] if env_config.tool_allowlist else [])
    if any(t["name"] == ANSWER_SPEC["name"] for t in all_tools[:-1]):
        raise EpisodeError(f"a server has a tool named {ANSWER_SPEC['name']!r}, the name of the final-answer tool")
    sessions = Sessions(pool, env_config, max_sessions, idle_timeout_s)

    async def health(_: Request) -> JSONResponse:
        return JSONResponse({"status": "healthy", "active_sessions": len(sessions.live), "max_sessions": max_sessions})

    async def metadata(_: Request) -> JSONResponse:
        return JSONResponse({"name": name, "description": f"mcprl MCP tool-use tasks ({len(pool.tasks)}) over "
                                                          f"{len(all_tools) - 1} tools, with mcprl's shaped reward",
                             "version": PROTOCOL_VERSION, "tasks": len(pool.tasks), "mode": "production",
                             "supports_concurrent_sessions": True, "max_concurrent_envs": max_sessions})

    async def schema(_: Request) -> JSONResponse:
        return JSONResponse({"action": ACTION_SCHEMA, "observation": OBSERVATION_SCHEMA,
                             "reset_observation": OBSERVATION_SCHEMA, "state": STATE_SCHEMA})

    async def openapi(_: Request) -> JSONResponse:
        get = {"get": {"responses": {"200": {"description": "OK"}}}}
        return JSONResponse({"openapi": "3.1.0", "info": {"title": f"{name} (OpenEnv)", "version": PROTOCOL_VERSION},
                             "paths": {"/health": get, "/metadata": get, "/schema": get,
                                       "/mcp": {"post": {"responses": {"200": {"description": "JSON-RPC 2.0"}}}}}})

    async def rpc(message: Any, session_id: str | None = None) -> dict[str, Any]:
        return redact(await answer(message, session_id))

    async def answer(message: Any, session_id: str | None) -> dict[str, Any]:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
            return _rpc_error(INVALID_REQUEST, "Invalid request: a JSON-RPC 2.0 object with a method", None)
        method, rid = message["method"], message.get("id")
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        sid = params.get("session_id") or session_id
        try:
            if method == "openenv/session/create":
                return _rpc_result({"session_id": sessions.create()[0]}, rid)
            if method == "openenv/session/close":
                if not params.get("session_id"):
                    return _rpc_error(INVALID_PARAMS, "Invalid params - 'session_id' is required", rid)
                if not sessions.close(params["session_id"]):
                    return _rpc_error(INVALID_PARAMS, f"Unknown session_id: {params['session_id']}", rid)
                return _rpc_result({"session_id": params["session_id"], "closed": True}, rid)
            if method == "tools/list":
                if sid:
                    session = sessions.get(sid)
                    return _rpc_result({"tools": await sessions.run(session, session.episode.tools)}, rid)
                return _rpc_result({"tools": all_tools}, rid)
            if method == "tools/call":
                if not params.get("name"):
                    return _rpc_error(INVALID_PARAMS, "Missing 'name' in params", rid)
                action = {"type": "call_tool", "tool_name": params["name"], "arguments": params.get("arguments", {})}
                if not sid:
                    return _rpc_error(INVALID_PARAMS, "tools/call needs params.session_id (openenv/session/create, "
                                                      "then reset over /ws?session_id=...): calls are episode steps", rid)
                session = sessions.get(sid)
                reply = await sessions.run(session, session.episode.step, action)
                return _rpc_result({**reply.observation, "reward": reply.reward, "done": reply.done}, rid)
            return _rpc_error(METHOD_NOT_FOUND, f"Method not found: {method}", rid)
        except EpisodeError as exc:
            return _rpc_error(INVALID_PARAMS, str(exc), rid)
        except Exception as exc:  # noqa: BLE001 - a reply, never a dropped connection
            return _rpc_error(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}", rid)

    async def mcp_http(request: Request) -> JSONResponse:
        try:
            message = json.loads(await request.body())
        except ValueError:
            return JSONResponse(_rpc_error(PARSE_ERROR, "Parse error", None))
        return JSONResponse(await rpc(message))

    async def mcp_ws(ws: WebSocket) -> None:
        await ws.accept()
        try:
            while True:
                try:
                    message = json.loads(await ws.receive_text())
                except ValueError:
                    await ws.send_text(json.dumps(_rpc_error(PARSE_ERROR, "Parse error", None)))
                    continue
                await ws.send_text(json.dumps(await rpc(message)))
        except WebSocketDisconnect:
            pass

    async def session_ws(ws: WebSocket) -> None:
        await ws.accept()
        requested = ws.query_params.get("session_id")
        try:
            if requested:
                sid, session = requested, sessions.get(requested)
                if session.attached:
                    raise EpisodeError(f"session {requested} already has a WebSocket attached")
            else:
                sid, session = sessions.create()
        except CapacityReached as exc:
            await _send_error(ws, str(exc), CAPACITY_REACHED, active_sessions=len(sessions.live),
                              max_sessions=max_sessions)
            await ws.close()
            return
        except EpisodeError as exc:
            await _send_error(ws, str(exc), "SESSION_ERROR")
            await ws.close()
            return
        session.attached = True
        try:
            while True:
                try:
                    message = json.loads(await ws.receive_text())
                    kind = message.get("type") if isinstance(message, dict) else None
                except ValueError as exc:
                    await _send_error(ws, f"Invalid JSON: {exc}", "INVALID_JSON")
                    continue
                try:
                    if kind == "close":
                        break
                    if kind == "reset":
                        data = message.get("data") or {}
                        reply = await sessions.run(session, session.episode.reset, data if isinstance(data, dict) else {})
                        frame = {"type": "observation", "data": reply.payload()}
                    elif kind == "step":
                        data = message.get("data")
                        if not isinstance(data, dict):
                            await _send_error(ws, "Invalid message: step needs an action object as data",
                                              "VALIDATION_ERROR")
                            continue
                        reply = await sessions.run(session, session.episode.step, data)
                        frame = {"type": "observation", "data": reply.payload()}
                    elif kind == "state":
                        frame = {"type": "state", "data": await sessions.run(session, session.episode.state)}
                    elif kind == "mcp":
                        frame = {"type": "mcp", "data": await rpc(message.get("data"), sid)}
                    else:
                        await _send_error(ws, f"Unknown message type: {kind}", "UNKNOWN_TYPE")
                        continue
                except EpisodeError as exc:
                    await _send_error(ws, str(exc), "EXECUTION_ERROR")
                    continue
                except Exception as exc:  # noqa: BLE001 - the session stays open
                    await _send_error(ws, f"{type(exc).__name__}: {exc}", "EXECUTION_ERROR")
                    continue
                await ws.send_text(json.dumps(frame, ensure_ascii=False, default=str))
        except WebSocketDisconnect:
            pass
        finally:
            session.attached = False
            if not requested:
                sessions.close(sid)
            with contextlib.suppress(Exception):
                await ws.close()

    routes = [Route("/health", health), Route("/metadata", metadata), Route("/schema", schema),
              Route("/openapi.json", openapi), Route("/mcp", mcp_http, methods=["POST"]),
              WebSocketRoute("/mcp", mcp_ws), WebSocketRoute("/ws", session_ws)]
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        for sid in list(sessions.live):
            sessions.close(sid)
        sessions.executor.shutdown(wait=True, cancel_futures=False)

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.sessions = sessions
    return app


async def _send_error(ws: WebSocket, message: str, code: str, **extra: Any) -> None:
    await ws.send_text(json.dumps({"type": "error", "data": redact({"message": message, "code": code, **extra})}))


def _rpc_result(result: Any, rid: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "result": result, "id": rid}


def _rpc_error(code: int, message: str, rid: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": rid}


@contextlib.contextmanager
def running(app: Starlette, host: str = "127.0.0.1", port: int = 8000, startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Serve `app` from a background thread for the block; yields its base URL (tests, benches, notebooks)."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="openenv-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise EpisodeError(f"the OpenEnv server did not start on {host}:{port}")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
