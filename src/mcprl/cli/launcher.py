"""`mcprl servers up` (all five over HTTP, stopped cleanly on SIGINT/SIGTERM) and `mcprl servers check`."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import httpx
import typer
from rich.console import Console
from rich.table import Table

from mcprl.cli.errors import fail
from mcprl.errors import ConfigError, McprlError
from mcprl.tools.config import OUR_SERVERS, ServersConfig, default_servers_config, load_servers_config

console = Console()
BASE_PORT = 7001
# One happy-path call per server of ours; third-party servers get initialize + list_tools only.
SMOKE_CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "polygon": ("get_last_quote", {"ticker": "AAPL"}),
    "fmp": ("get_quote", {"symbol": "MSFT"}),
    "tavily": ("search", {"query": "Apple Q3 2025 earnings", "max_results": 1}),
    "python": ("run_python", {"code": "print(6 * 7)"}),
    "slack": ("list_channels", {}),
}


@dataclass
class CheckRow:
    server: str
    ok: bool
    tools: int
    call: str
    latency_ms: float | None
    detail: str


def server_command(name: str, port: int, host: str, backend: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mcprl.servers",
        name,
        "--transport",
        "http",
        "--host",
        host,
        "--port",
        str(port),
        "--backend",
        backend,
    ]


def wait_listening(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with code {proc.returncode}")
        try:
            httpx.get(url, timeout=0.5)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise TimeoutError(f"not listening on {url} after {timeout:.0f}s")


def stop_all(procs: dict[str, subprocess.Popen]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + 5
    for proc in procs.values():
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def up(
    host: str = typer.Option("127.0.0.1", help="Interface to bind."),
    base_port: int = typer.Option(BASE_PORT, help="polygon gets this port, then fmp, tavily, python, slack."),
    backend: str = typer.Option("offline", help="offline | live"),
    only: Optional[list[str]] = typer.Option(None, "--only", help="Start just these servers."),
) -> None:
    """Start all five servers over streamable HTTP; Ctrl-C (or SIGTERM) stops every one of them.

    Example: mcprl servers up --base-port 7001
    """
    names = only or list(OUR_SERVERS)
    unknown = sorted(set(names) - set(OUR_SERVERS))
    if unknown:
        fail(ConfigError(f"unknown servers {unknown}; known: {list(OUR_SERVERS)}"))
    ports = {name: base_port + OUR_SERVERS.index(name) for name in names}
    procs: dict[str, subprocess.Popen] = {}
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        for name, port in ports.items():
            procs[name] = subprocess.Popen(server_command(name, port, host, backend))
        for name, port in ports.items():
            try:
                wait_listening(f"http://{host}:{port}/mcp", procs[name])
            except (RuntimeError, TimeoutError) as e:
                fail(McprlError(f"server '{name}' on port {port}: {e}"))
        table = Table(title="MCP servers up (streamable HTTP)")
        table.add_column("server")
        table.add_column("url")
        table.add_column("pid")
        for name, port in ports.items():
            table.add_row(name, f"http://{host}:{port}/mcp", str(procs[name].pid))
        console.print(table)
        console.print("Ctrl-C stops them all.")
        while not stopping:
            dead = [n for n, p in procs.items() if p.poll() is not None]
            if dead:
                fail(McprlError(f"server(s) exited: {dead}; stopping the rest"))
            time.sleep(0.2)
        console.print("stopping servers…")
    finally:
        stop_all(procs)


async def check_servers(config: ServersConfig, timeout: float = 20.0) -> list[CheckRow]:
    """initialize + list_tools on every server, then one happy-path call where we know one."""
    from mcprl.tools.manager import ToolManager  # the MCP SDK loads once a command talks to a server

    rows: list[CheckRow] = []
    tm = ToolManager(config)
    try:
        failures = await asyncio.wait_for(tm.start(tolerate_failures=True), timeout * 2)
        for spec in config.servers:
            if spec.name in failures:
                rows.append(CheckRow(spec.name, False, 0, "-", None, failures[spec.name]))
                continue
            tools = [t for t in tm.tools() if t.server == spec.name]
            smoke = SMOKE_CALLS.get(spec.name)
            if smoke is None:
                rows.append(CheckRow(spec.name, bool(tools), len(tools), "(list_tools only)", None, "" if tools else "no tools"))
                continue
            tool, args = smoke
            result = await tm.execute_tool(f"{spec.name}.{tool}", args, timeout=timeout)
            shown = result.get("data") if result["ok"] else result["error"]
            detail = shown if isinstance(shown, str) else json.dumps(shown, separators=(",", ":"))
            rows.append(CheckRow(spec.name, result["ok"], len(tools), tool, result["latency_ms"], detail))
    finally:
        await tm.close()
    return rows


def check(
    servers_config: Optional[Path] = typer.Option(
        None, "--servers-config", "-c", help="Servers YAML; default: our five servers."
    ),
    transport: str = typer.Option("stdio", help="For our servers: stdio (spawn them) or http (`servers up`)."),
    timeout: float = typer.Option(20.0, min=0.001, help="Seconds per start and per call (> 0)."),
) -> None:
    """Connect to each server, list its tools, make one happy-path call; exit 1 if any fails.

    Example: mcprl servers check --servers-config my_servers.yaml
    """
    try:
        config = load_servers_config(servers_config) if servers_config else default_servers_config(transport)
    except ConfigError as e:
        fail(e)
    with console.status("checking MCP servers…"):
        rows = asyncio.run(check_servers(config, timeout))
    table = Table(title="MCP server health")
    for col in ("server", "status", "tools", "call", "ms"):
        table.add_column(col, no_wrap=True)
    table.add_column("detail", no_wrap=True)
    for r in rows:
        status = "[green]ok[/green]" if r.ok else "[red]FAIL[/red]"
        latency = f"{r.latency_ms:.1f}" if r.latency_ms is not None else "-"
        detail = r.detail if len(r.detail) <= 24 else r.detail[:23] + "…"
        table.add_row(r.server, status, str(r.tools), r.call, latency, detail)
    console.print(table)
    failed = [r for r in rows if not r.ok]
    if failed:
        for r in failed:
            console.print(f"[red]✗ {r.server}:[/red] {r.detail}")
        raise typer.Exit(1)
    console.print("All MCP tool smoke tests passed.")
