"""The CLI reference (docs/cli.md), generated from the commands themselves so it cannot drift; a test
checks the page holds the current text."""

from __future__ import annotations

from typing import Any

import typer

from mcprl.cli.main import app


def cli_reference() -> str:
    """Every command and sub-command: its one-line help and a table of its arguments and options."""
    root = typer.main.get_command(app)
    return "\n".join(_command(root, "mcprl", root.context_class(root, info_name="mcprl"))).rstrip("\n") + "\n"


def _command(cmd: Any, path: str, ctx: Any) -> list[str]:
    lines = []
    if path != "mcprl":
        lines += [f"### `{path}`", "", (cmd.help or cmd.short_help or "").strip().split("\n\n")[0].replace("\n", " "), ""]
        params = [p for p in cmd.params if p.name != "help" and not getattr(p, "hidden", False)]
        if params:
            lines += ["| argument / option | default | meaning |", "|---|---|---|"]
            lines += [_param(p) for p in params]
            lines.append("")
    if hasattr(cmd, "list_commands"):  # a group (typer's own click types: duck-typed)
        for name in sorted(cmd.list_commands(ctx)):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                lines += _command(sub, f"{path} {name}", sub.context_class(sub, info_name=name, parent=ctx))
    return lines


def _param(p: Any) -> str:
    if p.param_type_name == "argument":
        name = f"`{(p.metavar or p.name).upper()}`"
    else:
        name = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    default = p.default
    shown = "" if default is None or callable(default) or (getattr(p, "is_flag", False) and not default) \
        else f"`{default}`"
    text = (getattr(p, "help", None) or "").replace("|", "\\|").replace("\n", " ")
    return f"| {name} | {shown} | {text} |"
