"""How every command ends on a typed error: one `error:` line on stderr and the class's exit code."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from mcprl.errors import McprlError


def print_error(err: McprlError) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {escape(str(err))}", soft_wrap=True, highlight=False)


def fail(err: McprlError) -> NoReturn:
    """Inside a command: the line, then typer's exit with the error's code."""
    print_error(err)
    raise typer.Exit(err.exit_code)
