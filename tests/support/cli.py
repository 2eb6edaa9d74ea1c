"""`mcprl train` alone as a typer app, for CliRunner: the command's options and exit codes without the rest
of the CLI."""

import typer

from mcprl.cli.train import train_command


def train_app() -> typer.Typer:
    app = typer.Typer(add_completion=False)
    app.command("train")(train_command)
    app.callback()(lambda: None)  # keeps `train` a subcommand
    return app
