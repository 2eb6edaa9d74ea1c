"""Helpers to talk to our servers from synchronous tests: a real MCP client session on a background event loop."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp.client.session import ClientSession


class SyncSession:
    """An initialized `ClientSession`, driven from sync code through an anyio portal."""

    def __init__(self, portal: BlockingPortal, session: ClientSession) -> None:
        self.portal, self.session = portal, session

    def tool_names(self) -> list[str]:
        return [t.name for t in self.portal.call(self.session.list_tools).tools]

    def call(self, tool: str, **arguments: Any):
        return self.portal.call(self.session.call_tool, tool, arguments)

    def ok(self, tool: str, **arguments: Any) -> dict:
        """Call a tool that must succeed; its structured result."""
        result = self.call(tool, **arguments)
        assert not result.is_error, result.content[0].text
        assert result.structured_content, f"{tool} returned no structured content"
        return result.structured_content

    def error(self, tool: str, **arguments: Any) -> str:
        """Call a tool that must fail; its error text."""
        result = self.call(tool, **arguments)
        assert result.is_error, f"{tool}({arguments}) unexpectedly succeeded: {result.structured_content}"
        return result.content[0].text


@asynccontextmanager
async def _session(transport) -> AsyncIterator[ClientSession]:
    async with transport as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextmanager
def connect(transport) -> Iterator[SyncSession]:
    """Enter an MCP client transport (stdio_client(...) or streamable_http_client(url)) and initialize a session."""
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(_session(transport)) as session:
        yield SyncSession(portal, session)


def stdio(name: str, *extra: str):
    """The stdio transport of one of our servers, started as `python -m mcprl.servers NAME`."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    return stdio_client(StdioServerParameters(command=sys.executable, args=["-m", "mcprl.servers", name, *extra]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sandbox_processes() -> list[int]:
    """Processes of sandbox runs (every one carries MCPRL_SANDBOX=1 in its environment)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if b"MCPRL_SANDBOX=1" in f.read().split(b"\0"):
                    pids.append(int(entry))
        except (OSError, ValueError):
            continue
    return pids


def none_left(within_s: float = 5.0) -> bool:
    """No sandbox process is left (waiting up to `within_s` for the last to go)."""
    deadline = time.monotonic() + within_s
    while sandbox_processes():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
