"""`mcprl tinker serve`: SkyRL's Tinker server on this machine, for runs that name it by URL."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from mcprl.cli.errors import fail
from mcprl.errors import ConfigError, McprlError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="The Tinker API (engine tinker).")


@app.callback()
def tinker() -> None:
    """The Tinker API (engine tinker)."""


@app.command()
def serve(
    model: Annotated[str, typer.Option(help="Base model: the default alias, a local directory or a cached HF id")] = "smollm2-135m",
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default: a free one)")] = None,
    directory: Annotated[Path, typer.Option("--dir", help="Its database, checkpoints and log")] = Path("runs/tinker-local"),
    lora_rank: Annotated[int, typer.Option(help="Largest LoRA rank a client may ask for")] = 32,
    backend_config: Annotated[str, typer.Option(help="JSON of further JAX backend settings, e.g. "
                                                '\'{"sample_max_num_sequences": 16}\'')] = "{}",
    startup_timeout: Annotated[float, typer.Option(help="Seconds to wait for it to answer")] = 600.0,
) -> None:
    """Start SkyRL's Tinker server (JAX on the CPU) and keep it up until Ctrl-C; runs reach it with
    `-o tinker.base_url=URL -o tinker.model=DIR` (it prints both).

    Example: mcprl tinker serve --port 8014
    """
    from mcprl.models.loading import resolve_model
    from mcprl.training.tinker.server import LocalTinkerServer

    try:
        extra = json.loads(backend_config)
        if not isinstance(extra, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        fail(ConfigError(f"--backend-config must be a JSON object: {exc}"))
    try:
        base = resolve_model(model)
        server = LocalTinkerServer(base, directory, port=port, startup_timeout_s=startup_timeout,
                                   backend_config={"max_lora_adapters": 4, "max_lora_rank": lora_rank, **extra})
        typer.echo(f"starting SkyRL's Tinker server on {base} (log: {server.log_path})")
        with server:
            typer.echo(f"Tinker API at {server.url}\n  mcprl train --engine tinker -o tinker.base_url={server.url} "
                       f"-o tinker.model={base}\nCtrl-C stops it.")
            while server.alive():
                time.sleep(1.0)
            fail(McprlError(f"the Tinker server stopped: {server.last_log_line()}"))
    except KeyboardInterrupt:
        pass
    except McprlError as exc:
        fail(exc)
