"""`mcprl openenv serve`: mcprl's verified tasks as an OpenEnv environment, for other trainers (docs/openenv.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mcprl.cli.errors import fail
from mcprl.errors import ConfigError, McprlError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="OpenEnv: mcprl's tasks served to other trainers.")


@app.callback()
def openenv() -> None:
    """OpenEnv: mcprl's tasks served to other trainers."""


@app.command()
def serve(
    data: Annotated[Path, typer.Option(help="Tasks (.jsonl, .json or .parquet) that reset picks from")],
    servers_config: Annotated[Path | None, typer.Option(help="MCP servers YAML (default: mcprl's own servers)")] = None,
    config: Annotated[Path | None, typer.Option("--config", "-c", help="A training YAML whose rollout and reward "
                                                                      "sections set the env (default: the defaults)")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port")] = 8000,
    max_sessions: Annotated[int, typer.Option(help="Concurrent sessions (episodes); more get CAPACITY_REACHED")] = 16,
) -> None:
    """Serve TASKS over OpenEnv's protocol: one WebSocket session per episode, actions list_tools,
    call_tool (the `answer` tool ends it) and message (a raw assistant turn), mcprl's shaped reward per step.

    Example: mcprl openenv serve --data data/processed/quickstart_test.jsonl --port 8000
    """
    import uvicorn

    from mcprl.data.sample import read_samples
    from mcprl.envs.config import EnvConfig
    from mcprl.integrations.openenv.app import build_app
    from mcprl.integrations.openenv.episode import TaskPool
    from mcprl.training.config import env_config, load_train_config

    try:
        if max_sessions < 1:
            raise ConfigError(f"--max-sessions must be at least 1, not {max_sessions}")
        if not data.is_file():
            raise ConfigError(f"--data {data}: no such file")
        tasks = read_samples(data)
        foreign = sorted({t.env_class for t in tasks} - {"mcp_tool_env"})
        if foreign:
            raise ConfigError(f"--data {data}: rows of env_class {', '.join(foreign)}; only mcp_tool_env tasks can be served")
        settings = env_config(load_train_config(config)) if config else {}
        if servers_config is not None:
            settings["servers_config"] = str(servers_config)
        env = EnvConfig.from_any(settings)
        typer.echo(f"starting the MCP servers for {len(tasks)} tasks")
        app = build_app(TaskPool(tasks), env, max_sessions=max_sessions)
    except McprlError as exc:
        fail(exc)
    except ValueError as exc:
        fail(ConfigError(str(exc)))
    typer.echo(f"OpenEnv server at http://{host}:{port} (WebSocket ws://{host}:{port}/ws, {max_sessions} sessions); "
               "Ctrl-C stops it.")
    uvicorn.run(app, host=host, port=port, log_level="warning")


@app.command()
def rows(
    data: Annotated[Path, typer.Option(help="mcprl tasks (.jsonl, .json or .parquet)")],
    out: Annotated[Path, typer.Option(help="The openenv_env rows to write")],
    url: Annotated[str | None, typer.Option(help="Put this server's URL in every row (else rollout.openenv.url)")] = None,
) -> None:
    """The same tasks as `env_class: openenv_env` rows that an `openenv serve` of them answers (reset by task_id,
    scored by the server): mcprl trains and evaluates on them over OpenEnv like any OpenEnv environment.

    Example: mcprl openenv rows --data data/processed/quickstart_test.jsonl --out data/openenv_test.jsonl
    """
    from mcprl.data.sample import as_openenv_row, read_samples, write_samples

    try:
        if not data.is_file():
            raise ConfigError(f"--data {data}: no such file")
        tasks = read_samples(data)
        write_samples([as_openenv_row(t, url) for t in tasks], out)
    except McprlError as exc:
        fail(exc)
    except ValueError as exc:
        fail(ConfigError(str(exc)))
    typer.echo(f"{len(tasks)} openenv_env rows -> {out}")
