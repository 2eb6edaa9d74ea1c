"""`mcprl servers ...`: run a domain MCP server. (`up` and `check` live in `launcher.py`; `main` adds them.)"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from mcprl.cli.errors import fail
from mcprl.errors import ConfigError
from mcprl.servers.errors import ServiceError

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="Run the domain MCP servers (polygon, fmp, tavily, python, slack)."
)


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


class Backend(StrEnum):
    offline = "offline"
    live = "live"


@app.callback()
def servers() -> None:
    """Run the domain MCP servers (polygon, fmp, tavily, python, slack)."""


@app.command()
def serve(
    name: Annotated[str, typer.Argument(help="polygon, fmp, tavily, python or slack")],
    transport: Annotated[Transport, typer.Option(help="stdio, or streamable HTTP at http://HOST:PORT/mcp")] = Transport.stdio,
    port: Annotated[int | None, typer.Option(help="HTTP port (default: the server's config)")] = None,
    host: Annotated[str, typer.Option(help="HTTP bind address")] = "127.0.0.1",
    backend: Annotated[Backend, typer.Option(help="offline (seeded data) or live (real API; needs its key)")] = Backend.offline,
    seed: Annotated[int, typer.Option(help="seed of the offline data")] = 0,
) -> None:
    """Serve one domain server over stdio or streamable HTTP.

    Example: mcprl servers serve polygon --transport http --port 7001
    """
    from mcprl.servers import registry

    try:
        registry.serve(name, transport.value, host=host, port=port, backend=backend.value, seed=seed)
    except ServiceError as exc:  # a server that cannot start as asked: bad input, exit 2
        fail(ConfigError(str(exc)))
    except KeyboardInterrupt:
        pass
