"""Servers config: which MCP servers to talk to and how (stdio command or HTTP url).

Works for third-party servers as well as ours, e.g.::

    servers:
      - {name: polygon, transport: stdio, command: mcprl, args: [servers, serve, polygon]}
      - {name: time, transport: stdio, command: python, args: [-m, mcp_server_time]}
      - {name: remote, transport: http, url: "http://127.0.0.1:7001/mcp"}
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mcprl.errors import ConfigError, suggest

OUR_SERVERS = ("polygon", "fmp", "tavily", "python", "slack")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ServerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, not a silently ignored setting

    name: str = Field(pattern=r"^[A-Za-z0-9_-]+$", description="Namespace of this server's tools.")
    transport: Literal["stdio", "http"] = "stdio"
    command: str | None = Field(None, description="stdio: executable to spawn.")
    args: list[str] = Field(default_factory=list, description="stdio: its arguments.")
    env: dict[str, str] = Field(default_factory=dict, description="stdio: extra env; ${VAR} expands from ours.")
    cwd: str | None = None
    url: str | None = Field(None, description="http: streamable-HTTP endpoint, e.g. http://127.0.0.1:7001/mcp.")
    headers: dict[str, str] = Field(default_factory=dict, description="http: headers; ${VAR} expands.")
    timeout_s: float = Field(20.0, gt=0, description="Default per-call timeout.")
    startup_timeout_s: float = Field(60.0, gt=0, description="Seconds the server may take to start and initialize.")
    rate_limit_per_s: float | None = Field(None, gt=0, description="Client-side call rate cap.")
    max_concurrency: int = Field(16, ge=1, description="In-flight calls to this server at once.")
    retries: int = Field(2, ge=0, description="Retries when the server cannot be reached before a call is sent.")
    max_result_chars: int = Field(4000, ge=100, description="Longer results are truncated with a marker.")
    tools: list[str] | None = Field(None, description="Allow-list of this server's tools; None exposes all.")

    @model_validator(mode="after")
    def _transport_fields(self) -> ServerSpec:
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"server '{self.name}': transport stdio needs `command` (and `args`)")
        if self.transport == "http" and not self.url:
            raise ValueError(f"server '{self.name}': transport http needs `url`, e.g. http://127.0.0.1:7001/mcp")
        return self

    def resolved_env(self) -> dict[str, str]:
        return {k: expand_env(v) for k, v in self.env.items()}

    def resolved_headers(self) -> dict[str, str]:
        return {k: expand_env(v) for k, v in self.headers.items()}


class ServersConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    servers: list[ServerSpec]

    @model_validator(mode="after")
    def _unique_names(self) -> ServersConfig:
        names = [s.name for s in self.servers]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate server names: {dupes}")
        return self

    def get(self, name: str) -> ServerSpec:
        for spec in self.servers:
            if spec.name == name:
                return spec
        raise ConfigError(f"no server named '{name}' in config; known: {[s.name for s in self.servers]}")


def expand_env(value: str) -> str:
    """Expand ${VAR} from the environment, so configs name secrets instead of holding them."""
    return _ENV_REF.sub(lambda m: os.environ.get(m.group(1), ""), value)


def our_server_spec(name: str, transport: str = "stdio", host: str = "127.0.0.1", port: int | None = None,
                    backend: str = "offline", seed: int = 0) -> ServerSpec:
    """Spec for one of mcprl's own servers. stdio spawns `python -m mcprl.servers NAME` (lean imports) with
    our PYTHONPATH: the MCP SDK gives stdio servers a minimal environment, and without it a server cannot
    import an mcprl (or dependencies) that this process found through PYTHONPATH."""
    if transport == "http":
        from mcprl.servers.registry import load_server_config

        port = port or load_server_config(name).port
        return ServerSpec(name=name, transport="http", url=f"http://{host}:{port}/mcp")
    args = ["-m", "mcprl.servers", name, "--backend", backend, "--seed", str(seed)]
    env = {"PYTHONPATH": "${PYTHONPATH}"} if os.environ.get("PYTHONPATH") else {}
    return ServerSpec(name=name, transport="stdio", command=sys.executable, args=args, env=env)


def default_servers_config(transport: str = "stdio", backend: str = "offline", seed: int = 0) -> ServersConfig:
    return ServersConfig(servers=[our_server_spec(n, transport, backend=backend, seed=seed) for n in OUR_SERVERS])


def load_servers_config(path: str | Path | None = None) -> ServersConfig:
    """Load a YAML/JSON servers config; None gives our five servers over stdio."""
    if path is None:
        return default_servers_config()
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"servers config not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
        if isinstance(raw, list):
            raw = {"servers": raw}
        return ServersConfig.model_validate(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML/JSON: {e}") from e
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        if first["type"] == "extra_forbidden":
            model = ServerSpec if len(first["loc"]) > 1 else ServersConfig
            hint = suggest(str(first["loc"][-1]), model.model_fields)
            raise ConfigError(f"{path}: {where}: unknown key{'; ' + hint if hint else ''} (known: "
                              f"{', '.join(model.model_fields)})") from None
        raise ConfigError(f"{path}: {where}: {first['msg']}") from e
