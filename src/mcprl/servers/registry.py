"""The five domain servers by name: their configs, how to build one, how to serve one.

Configs are package data (`mcprl/servers/configs/*.yaml`); `mcp_servers/configs/` holds symlinks
to them for people browsing the repository, so there is one copy to edit.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from mcprl.episode import STATE_DIR_ENV
from mcprl.servers.errors import InvalidArgumentError, NotFoundError, suggest

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from mcprl.servers.backends.http import ApiClient

SERVER_NAMES = ("polygon", "fmp", "tavily", "python", "slack")
BACKENDS = ("offline", "live")
TRANSPORTS = ("stdio", "http")
ADMIN_TOOLS: dict[str, tuple[str, ...]] = {"slack": ("reset_workspace",)}  # for setup/verification, never for agents


class Credentials(BaseModel):
    """Where the API key comes from and how it is sent; the key itself is never in a config."""

    model_config = ConfigDict(extra="forbid")
    env: str = Field(description="environment variable holding the key")
    send_as: Literal["bearer", "query"] = Field("bearer", description="Authorization: Bearer header, or a query parameter")
    query_param: str = Field("apikey", description="query parameter name when send_as is 'query'")


class ServerConfig(BaseModel):
    """One server's `configs/<name>.yaml`."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str
    credentials: Credentials | None = Field(None, description="None for servers without a remote service")
    base_url: str | None = Field(None, description="the live service's API root")
    port: int = Field(description="default port for --transport http")
    timeout_s: float = Field(description="HTTP timeout of the live backend; default run timeout for python")
    rate_limits: dict[str, float] = Field(default_factory=dict, description="requests per minute per tool (hints)")


def _check_name(name: str) -> None:
    if name not in SERVER_NAMES:
        raise NotFoundError(f"unknown server {name!r}: {suggest(name, list(SERVER_NAMES))}")


def load_server_config(name: str) -> ServerConfig:
    _check_name(name)
    text = resources.files("mcprl.servers").joinpath("configs", f"{name}.yaml").read_text(encoding="utf-8")
    return ServerConfig.model_validate(yaml.safe_load(text))


def _api_client(config: ServerConfig) -> ApiClient:
    from mcprl.servers.backends.http import ApiClient, require_key

    creds = config.credentials
    if creds is None or config.base_url is None:
        raise InvalidArgumentError(f"server {config.name!r} has no live service")
    key = require_key(creds.env)
    return ApiClient(
        config.name,
        config.base_url,
        key,
        key_env=creds.env,
        auth=creds.send_as,
        query_param=creds.query_param,
        timeout_s=config.timeout_s,
    )


def build_server(name: str, backend: str = "offline", seed: int = 0) -> MCPServer:
    """A ready MCP server; a live backend checks its key first (MissingCredentialsError names the variable)."""
    _check_name(name)
    if backend not in BACKENDS:
        raise InvalidArgumentError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    config = load_server_config(name)
    live = backend == "live" and name != "python"  # the sandbox is always local
    api = _api_client(config) if live else None

    if name == "python":
        from mcprl.servers import python

        return python.create_server(config.timeout_s)
    if name in ("polygon", "fmp"):
        from mcprl.servers.offline.market import MarketData

        if name == "polygon":
            from mcprl.servers import polygon
            from mcprl.servers.backends.polygon import LivePolygon, OfflinePolygon

            return polygon.create_server(LivePolygon(api) if api else OfflinePolygon(MarketData(seed)))
        from mcprl.servers import fmp
        from mcprl.servers.backends.fmp import LiveFmp, OfflineFmp

        return fmp.create_server(LiveFmp(api) if api else OfflineFmp(MarketData(seed)))
    if name == "tavily":
        from mcprl.servers import tavily
        from mcprl.servers.backends.tavily import LiveSearch, OfflineSearch
        from mcprl.servers.offline.corpus import SearchCorpus

        return tavily.create_server(LiveSearch(api) if api else OfflineSearch(SearchCorpus(seed=seed)))
    from mcprl.servers import slack
    from mcprl.servers.backends.slack import LiveSlack, OfflineSlack
    from mcprl.servers.offline.slack import Workspace

    return slack.create_server(LiveSlack(api) if api else OfflineSlack(Workspace(seed=seed, journal=_journal("slack", seed))))


def _journal(name: str, seed: int) -> Path | None:
    """Where a stateful offline server keeps its changes so that a restart loses none (None: not kept)."""
    state_dir = os.environ.get(STATE_DIR_ENV)
    return Path(state_dir) / f"{name}-{seed}.jsonl" if state_dir else None


def serve(
    name: str,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int | None = None,
    backend: str = "offline",
    seed: int = 0,
) -> None:
    """Build a server and run it until the client disconnects (stdio) or the process is stopped (http)."""
    if transport not in TRANSPORTS:
        raise InvalidArgumentError(f"unknown transport {transport!r}: use one of {', '.join(TRANSPORTS)}")
    server = build_server(name, backend, seed)
    from mcprl.servers.base import quiet_logging  # after build_server: a missing key fails before the SDK loads

    quiet_logging()
    if transport == "stdio":
        server.run("stdio")
    else:
        port = port if port is not None else load_server_config(name).port
        server.run("streamable-http", host=host, port=port, streamable_http_path="/mcp")
