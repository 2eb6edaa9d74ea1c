"""The one `mcprl` command: each package contributes a sub-app."""

from __future__ import annotations

import typer

from mcprl.servers.cli import app as servers_app
from mcprl.tools.cli import app as tools_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Train LLM agents with RL on MCP tools.")
app.add_typer(servers_app, name="servers")
app.add_typer(tools_app, name="tools")


if __name__ == "__main__":
    app()
