"""One live MCP session per server, started once, reused by every call, restarted after a crash.

The SDK's transports are anyio context managers that must be entered and exited by the same task,
so each connection owns a runner task that holds them open until `close()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any

import anyio
import mcp.types as mt
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from mcprl.episode import STATE_DIR_ENV
from mcprl.tools.config import ServerSpec
from mcprl.tools.errors import MalformedReply, ServerCrashed, ServerUnavailable

# What a dead transport looks like from the caller's side.
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
    EOFError,
    OSError,
)


def server_log_path(name: str) -> Path:
    """Where a stdio server's stderr goes: out of the trainer's console, kept for post-mortems."""
    path = Path(tempfile.gettempdir()) / "mcprl-servers" / f"{name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class ServerConnection:
    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.tools: list[mt.Tool] = []
        self.restarts = 0
        self.malformed_replies = 0  # lines from the server that were no JSON-RPC message
        self._session: ClientSession | None = None
        self._runner: asyncio.Task | None = None
        self._stop: asyncio.Event | None = None
        self._lock = asyncio.Lock()
        self._errlog: IO[str] | None = None
        self._state_dir: Path | None = None  # kept across restarts: a stateful server journals there

    @property
    def alive(self) -> bool:
        if self._session is None or self._runner is None or self._runner.done():
            return False
        # A server killed between calls closes the session's dispatcher; notice it before sending.
        dispatcher = getattr(self._session, "_dispatcher", None)
        return not getattr(dispatcher, "_closed", False)

    async def session(self) -> ClientSession:
        """The live session, (re)starting the server if it is not running."""
        if self.alive:
            return self._session  # type: ignore[return-value]
        async with self._lock:
            if self.alive:
                return self._session  # type: ignore[return-value]
            if self._runner is not None:
                self.restarts += 1
                await self._shutdown()
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[ClientSession] = loop.create_future()
            self._stop = asyncio.Event()
            self._runner = asyncio.create_task(self._run(ready), name=f"mcp-{self.spec.name}")
            try:
                self._session = await asyncio.wait_for(asyncio.shield(ready), self.spec.startup_timeout_s)
            except TimeoutError:  # a server that hangs at start is not retried: it would hang again
                ready.cancel()  # nobody waits for it now
                self._runner.cancel()  # stop it where it hangs, not after _shutdown's grace
                await self._shutdown()
                raise ServerCrashed(f"server '{self.spec.name}' did not finish starting within "
                                    f"{self.spec.startup_timeout_s:g} s (startup_timeout_s in the servers config)") from None
            except BaseException:
                await self._shutdown()
                raise
            return self._session

    def mark_dead(self) -> None:
        """Called when a call saw the transport die: the next call starts a fresh server."""
        self._session = None
        if self._stop is not None:
            self._stop.set()

    async def close(self) -> None:
        async with self._lock:
            await self._shutdown()
            if self._state_dir is not None:
                shutil.rmtree(self._state_dir, ignore_errors=True)
                self._state_dir = None

    async def _shutdown(self) -> None:
        self._session = None
        if self._stop is not None:
            self._stop.set()
        if self._runner is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._runner), 10)
            except BaseException:
                self._runner.cancel()
                with contextlib.suppress(BaseException):
                    await self._runner
        self._runner = None
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None

    async def _open(self, stack: contextlib.AsyncExitStack):
        spec = self.spec
        if spec.transport == "http":
            client = await stack.enter_async_context(create_mcp_http_client(headers=spec.resolved_headers() or None))
            return await stack.enter_async_context(streamable_http_client(spec.url, http_client=client))
        if self._state_dir is None:
            self._state_dir = Path(tempfile.mkdtemp(prefix=f"mcprl-state-{spec.name}-"))
        env = {STATE_DIR_ENV: str(self._state_dir), **spec.resolved_env()}
        params = StdioServerParameters(command=spec.command, args=spec.args, env=env, cwd=spec.cwd)
        self._errlog = server_log_path(spec.name).open("a")
        return await stack.enter_async_context(stdio_client(params, errlog=self._errlog))

    async def _run(self, ready: asyncio.Future[ClientSession]) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await self._open(stack)
                session = await stack.enter_async_context(ClientSession(read, write, message_handler=self._on_message))
                await session.initialize()
                self._watch_reply_ids(session)
                self.tools = await _list_all_tools(session)
                ready.set_result(session)
                assert self._stop is not None
                await self._stop.wait()
        except BaseException as e:  # noqa: BLE001 - the runner reports, never propagates
            if not ready.done():
                ready.set_exception(ServerUnavailable(f"server '{self.spec.name}' failed to start: {_describe(e)}"
                                                  f"{self._log_hint()}"))
        finally:
            self._session = None

    async def _on_message(self, message: Any) -> None:
        """A line from the server that is no JSON-RPC message (invalid JSON, `result: null`) is a reply gone
        wrong; the call it was meant for would wait for its whole timeout."""
        if isinstance(message, Exception):
            self._malformed(f"a line that is no valid JSON-RPC message ({_describe(message).splitlines()[0][:120]})")

    def _watch_reply_ids(self, session: ClientSession) -> None:
        """A reply for a request id this session never sent answers nobody: the SDK drops it, and the call it
        was meant for waits for its whole timeout. (A late reply to a call that timed out is not one of these.)"""
        dispatcher = getattr(session, "_dispatcher", None)
        resolve = getattr(dispatcher, "_resolve_pending", None)
        if resolve is None:  # another SDK version: replies are routed as it does
            return

        def checked(request_id: Any, outcome: Any) -> None:
            issued = isinstance(request_id, int) and 0 < request_id <= getattr(dispatcher, "_next_id", 0)
            if request_id is not None and not issued:
                self._malformed(f"a reply for request id {request_id!r}, which was never sent")
                return
            resolve(request_id, outcome)

        dispatcher._resolve_pending = checked

    def _malformed(self, what: str) -> None:
        """Count a malformed reply; with one call in flight it must be that call's, so that call fails at
        once. With several in flight it names none of them, and they wait (the count says it happened)."""
        self.malformed_replies += 1
        pending = getattr(getattr(self._session, "_dispatcher", None), "_pending", None)
        if pending is not None and len(pending) == 1:
            (waiting,) = pending.values()
            with contextlib.suppress(Exception):
                waiting.send.send_nowait(mt.ErrorData(code=mt.PARSE_ERROR, message=MalformedReply.describe(self.spec.name, what)))

    def _log_hint(self) -> str:
        return f" (stderr: {server_log_path(self.spec.name)})" if self.spec.transport == "stdio" else ""


async def _list_all_tools(session: ClientSession) -> list[mt.Tool]:
    tools: list[mt.Tool] = []
    cursor = None
    while True:
        params = mt.PaginatedRequestParams(cursor=cursor) if cursor else None
        result = await session.list_tools(params=params)
        tools.extend(result.tools)
        cursor = result.next_cursor
        if not cursor:
            return tools


def _describe(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(_describe(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
