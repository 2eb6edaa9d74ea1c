"""Tool-call latency: plain function vs raw MCP `ClientSession.call_tool` vs `ToolManager.execute_tool`.

Same server, same tool, same transport; raw and ToolManager are measured in interleaved blocks so
machine noise hits both alike. Target: ToolManager <= 1.2x the raw SDK (median, stdio).

    .venv/bin/python bench/tool_latency.py [--calls 500] [--server polygon]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from typing import Any, Awaitable, Callable

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from mcprl.cli.launcher import SMOKE_CALLS, server_command, wait_listening
from mcprl.servers.registry import build_server
from mcprl.tools.config import ServerSpec, ServersConfig, our_server_spec
from mcprl.tools.manager import ToolManager
from side_by_side import print_table

BLOCK = 10
CONCURRENCY = 8


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed_calls(call: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def throughput(call: Callable[[], Awaitable[Any]], n: int) -> float:
    async def worker() -> None:
        for _ in range(n // CONCURRENCY):
            await call()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return (n // CONCURRENCY * CONCURRENCY) / (time.perf_counter() - t0)


@contextlib.asynccontextmanager
async def raw_session(spec: ServerSpec):
    if spec.transport == "http":
        transport = streamable_http_client(spec.url)
    else:
        transport = stdio_client(StdioServerParameters(command=spec.command, args=spec.args),
                                 errlog=open("/dev/null", "w"))
    async with transport as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def measure(spec: ServerSpec, tool: str, args: dict[str, Any], calls: int) -> dict[str, dict[str, float]]:
    async with raw_session(spec) as session, ToolManager(ServersConfig(servers=[spec])) as tm:
        async def raw() -> Any:
            result = await session.call_tool(tool, args)
            assert not result.is_error
            return result

        async def managed() -> Any:
            result = await tm.execute_tool(tool, args)
            assert result["ok"], result
            return result

        await timed_calls(raw, 20)
        await timed_calls(managed, 20)
        samples: dict[str, list[float]] = {"raw": [], "toolmanager": []}
        for _ in range(max(1, calls // BLOCK)):
            samples["raw"] += await timed_calls(raw, BLOCK)
            samples["toolmanager"] += await timed_calls(managed, BLOCK)
        rates = {"raw": await throughput(raw, calls), "toolmanager": await throughput(managed, calls)}
        return {k: {"median": statistics.median(v), "p99": pct(v, 0.99), "n": len(v), "rate": rates[k]}
                for k, v in samples.items()}


def plain(server_name: str, tool: str, args: dict[str, Any], calls: int) -> dict[str, float]:
    fn = build_server(server_name)._tool_manager.get_tool(tool).fn
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(**args)
        samples.append((time.perf_counter() - t0) * 1000)
    return {"median": statistics.median(samples), "p99": pct(samples, 0.99), "n": calls, "rate": float("nan")}


async def main_async(args: argparse.Namespace) -> None:
    tool, tool_args = SMOKE_CALLS[args.server]
    rows: list[tuple[str, str, dict[str, float]]] = [("plain function", "in-process", plain(args.server, tool, tool_args, args.calls))]
    stdio = await measure(our_server_spec(args.server), tool, tool_args, args.calls)
    rows += [("raw ClientSession", "stdio", stdio["raw"]), ("ToolManager", "stdio", stdio["toolmanager"])]
    proc = subprocess.Popen(server_command(args.server, args.port, "127.0.0.1", "offline"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{args.port}/mcp"
        wait_listening(url, proc)
        http = await measure(ServerSpec(name=args.server, transport="http", url=url), tool, tool_args, args.calls)
    finally:
        proc.terminate()
        proc.wait(10)
    rows += [("raw ClientSession", "http", http["raw"]), ("ToolManager", "http", http["toolmanager"])]

    raw_median = {"stdio": stdio["raw"]["median"], "http": http["raw"]["median"]}
    table = []
    for name, transport, s in rows:
        ratio = f"{s['median'] / raw_median[transport]:.2f}x" if transport in raw_median else "-"
        rate = "-" if s["rate"] != s["rate"] else f"{s['rate']:.0f}"
        table.append((name, transport, f"{s['median']:.3f}", f"{s['p99']:.3f}", rate, ratio))
    print_table(f"{args.server}.{tool} latency ({args.calls} sequential calls; calls/s with {CONCURRENCY} concurrent "
                f"callers)", ("path", "transport", "median ms", "p99 ms", "calls/s x8", "vs raw (median)"), table)
    ratio_http = http["toolmanager"]["median"] / http["raw"]["median"]
    print(f"toolmanager_vs_raw_http={ratio_http:.2f}")
    print(f"result: toolmanager_vs_raw_stdio={stdio['toolmanager']['median'] / stdio['raw']['median']:.2f} (target <= 1.2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--server", default="polygon")
    parser.add_argument("--port", type=int, default=7101)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
