"""`mcprl tools list|call`: talk to any MCP server from a servers config."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console
from rich.table import Table

from mcprl.cli.errors import fail
from mcprl.errors import ConfigError

if TYPE_CHECKING:  # the MCP SDK loads once a command talks to a server, not for `mcprl --help`
    from mcprl.tools.manager import ToolManager

app = typer.Typer(no_args_is_help=True, help="List and call tools of MCP servers.")
console = Console()
ConfigOpt = typer.Option(None, "--servers-config", "-c", help="Servers YAML; default: mcprl's five servers (stdio).")


def _manager(config: Optional[Path]) -> ToolManager:
    from mcprl.tools.manager import ToolManager

    try:
        return ToolManager(config)
    except ConfigError as e:
        fail(e)


@app.command("list")
def list_tools(servers_config: Optional[Path] = ConfigOpt) -> None:
    """List every tool with its server and parameters.

    Example: mcprl tools list --servers-config my_servers.yaml
    """

    async def run():
        async with _manager(servers_config) as tm:
            return tm.tools()

    tools = asyncio.run(run())
    table = Table(title=f"{len(tools)} tools")
    for col in ("tool", "server", "parameters", "description"):
        table.add_column(col)
    for t in tools:
        props = t.input_schema.get("properties", {})
        required = set(t.input_schema.get("required", []))
        params = ", ".join(f"{p}{'' if p in required else '?'}: {s.get('type', 'any')}" for p, s in props.items())
        table.add_row(t.name, t.server, params, t.description.split("\n")[0][:80])
    console.print(table)


@app.command("call")
def call_tool(
    tool: str = typer.Argument(..., help="TOOL or SERVER.TOOL"),
    arguments: str = typer.Argument("{}", help="JSON object of arguments"),
    servers_config: Optional[Path] = ConfigOpt,
    timeout: float = typer.Option(20.0, min=0.001, help="Seconds before the call counts as timed out (> 0)."),
) -> None:
    """Call one tool and print its result as JSON; exit 1 when the call failed.

    Example: mcprl tools call polygon.get_last_quote '{"ticker": "AAPL"}'
    """
    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as e:
        fail(ConfigError(f"arguments are not valid JSON ({e.msg} at char {e.pos}): {arguments}"))

    async def run():
        async with _manager(servers_config) as tm:
            return await tm.execute_tool(tool, args, timeout=timeout)

    result = asyncio.run(run())
    print(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    raise typer.Exit(0 if result["ok"] else 1)
