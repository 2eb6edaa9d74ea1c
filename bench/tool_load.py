"""Tool calls under load: one HTTP server with 32/64/128 concurrent MCP sessions, and the stdio ToolManager
with 128/256/512 calls in flight; errors, p50/p99 latency and calls/s side by side.

Same server (`polygon`, offline backend) and call as bench/tool_latency.py. An HTTP session is a ToolManager
of its own (one MCP session each) calling in a loop; the stdio rows are one ToolManager whose server takes
every call in flight at once (`max_concurrency` = the in-flight count, so none waits on the client's own
semaphore). Every row makes `--calls` calls. Target: no errors at any load.

    .venv/bin/python bench/tool_load.py [--calls 1024] [--server polygon]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from typing import Any

from mcprl.cli.launcher import SMOKE_CALLS, server_command, wait_listening
from mcprl.tools.config import ServerSpec, ServersConfig, our_server_spec
from mcprl.tools.manager import ToolManager
from side_by_side import print_table
from tool_latency import pct

HTTP_SESSIONS = (32, 64, 128)
STDIO_IN_FLIGHT = (128, 256, 512)


async def timed(tm: ToolManager, tool: str, args: dict[str, Any], latencies: list[float], errors: list[str]) -> None:
    t0 = time.perf_counter()
    result = await tm.execute_tool(tool, args)
    latencies.append((time.perf_counter() - t0) * 1000)
    if not result["ok"]:
        errors.append(f"{result['error_type']}: {result['error']}")


def row(transport: str, load: str, latencies: list[float], errors: list[str], wall: float) -> dict[str, Any]:
    return {"transport": transport, "load": load, "calls": len(latencies), "errors": errors,
            "p50": statistics.median(latencies), "p99": pct(latencies, 0.99), "rate": len(latencies) / wall}


async def http_load(url: str, server: str, sessions: int, calls: int) -> dict[str, Any]:
    """`sessions` ToolManagers, each one MCP session to the server, each making calls/sessions calls in turn."""
    spec = ServerSpec(name=server, transport="http", url=url)
    managers = [ToolManager(ServersConfig(servers=[spec])) for _ in range(sessions)]
    await asyncio.gather(*(tm.start() for tm in managers))
    tool, args = SMOKE_CALLS[server]
    latencies: list[float] = []
    errors: list[str] = []

    async def session(tm: ToolManager) -> None:
        for _ in range(calls // sessions):
            await timed(tm, tool, args, latencies, errors)

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(session(tm) for tm in managers))
        wall = time.perf_counter() - t0
    finally:
        await asyncio.gather(*(tm.close() for tm in managers))
    return row("http", f"{sessions} sessions", latencies, errors, wall)


async def stdio_load(server: str, in_flight: int, calls: int) -> dict[str, Any]:
    """One ToolManager, `in_flight` calls sent at once, in waves until `calls` are made."""
    spec = our_server_spec(server).model_copy(update={"max_concurrency": in_flight})
    tool, args = SMOKE_CALLS[server]
    latencies: list[float] = []
    errors: list[str] = []
    async with ToolManager(ServersConfig(servers=[spec])) as tm:
        await timed(tm, tool, args, [], [])  # warm
        t0 = time.perf_counter()
        for _ in range(max(1, calls // in_flight)):
            await asyncio.gather(*(timed(tm, tool, args, latencies, errors) for _ in range(in_flight)))
        wall = time.perf_counter() - t0
    return row("stdio", f"{in_flight} in flight", latencies, errors, wall)


async def main_async(args: argparse.Namespace) -> None:
    rows = []
    proc = subprocess.Popen(server_command(args.server, args.port, "127.0.0.1", "offline"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{args.port}/mcp"
        wait_listening(url, proc)
        for sessions in HTTP_SESSIONS:
            rows.append(await http_load(url, args.server, sessions, args.calls))
    finally:
        proc.terminate()
        proc.wait(10)
    for in_flight in STDIO_IN_FLIGHT:
        rows.append(await stdio_load(args.server, in_flight, args.calls))

    tool = SMOKE_CALLS[args.server][0]
    print_table(f"{args.server}.{tool} under load ({args.calls} calls a row)",
                ("transport", "load", "calls", "errors", "p50 ms", "p99 ms", "calls/s"),
                [(r["transport"], r["load"], str(r["calls"]), str(len(r["errors"])), f"{r['p50']:.1f}",
                  f"{r['p99']:.1f}", f"{r['rate']:.0f}") for r in rows])
    errors = [e for r in rows for e in r["errors"]]
    for error in sorted(set(errors))[:5]:
        print(f"error: {error}")
    print(f"result: errors={len(errors)} of {sum(r['calls'] for r in rows)} calls (target 0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1024, help="calls per row (a multiple of 512 fills every wave)")
    parser.add_argument("--server", default="polygon")
    parser.add_argument("--port", type=int, default=7102)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
