"""SkyRL's Tinker server without `uv` (`python -m mcprl.training.tinker.serve_main api|engine ARGS`).

The API's lifespan starts its engine as `uv run ... -m skyrl.tinker.engine`, parsed from its parent's
command line; here both processes are this module, so mcprl._skyrl's Python 3.11 TypedDict shim runs
before SkyRL in each, and no `uv` or `sitecustomize.py` is needed. Nothing but SkyRL's own server and
engine runs in them.
"""

from __future__ import annotations

import runpy
import sys

from mcprl._skyrl import tinker_server


def _engine_command(parent_cmd: list[str], engine_config: object) -> list[str]:
    _, config = tinker_server()
    return [sys.executable, "-m", "mcprl.training.tinker.serve_main", "engine", *config.config_to_argv(engine_config)]


def api(argv: list[str]) -> None:
    import argparse

    import uvicorn

    server, config = tinker_server()
    parser = argparse.ArgumentParser(prog="mcprl tinker serve (api)")
    config.add_model(parser, config.EngineConfig)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    server._build_uv_run_cmd_engine = _engine_command
    server.app.state.engine_config = config.EngineConfig.model_validate(
        {k: v for k, v in vars(args).items() if k in config.EngineConfig.model_fields})
    uvicorn.run(server.app, host=args.host, port=args.port, log_level="warning")


def engine(argv: list[str]) -> None:
    sys.argv = ["skyrl.tinker.engine", *argv]
    runpy.run_module("skyrl.tinker.engine", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    {"api": api, "engine": engine}[sys.argv[1]](sys.argv[2:])
