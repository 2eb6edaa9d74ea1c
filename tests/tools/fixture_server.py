"""A small real MCP server for tool-layer tests: fast, slow, crashing, huge and failing tools."""

import os
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("fixture")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def lookup(key: str, limit: int = 3) -> dict:
    """Return a small structured record."""
    return {"key": key, "values": list(range(limit))}


@server.tool()
def sleep(seconds: float) -> str:
    """Block for a while (a hanging tool)."""
    time.sleep(seconds)
    return "woke"


@server.tool()
def crash() -> str:
    """Kill the server process."""
    os._exit(3)


@server.tool()
def big(n: int) -> str:
    """Return n characters."""
    return "x" * n


@server.tool()
def fail(reason: str) -> str:
    """Raise an error inside the tool."""
    raise ValueError(f"refused: {reason}")


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
