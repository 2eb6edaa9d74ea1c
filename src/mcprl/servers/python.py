"""The `python` MCP server: run Python code in the local sandbox (there is no live variant)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from mcprl.servers import sandbox
from mcprl.servers.base import DomainServer
from mcprl.servers.sandbox import SandboxResult


class RunOutput(BaseModel):
    """What the agent sees: deterministic for the same code (no timings), and short."""

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool
    truncated: bool

    @classmethod
    def of(cls, result: SandboxResult) -> RunOutput:
        return cls(**result.model_dump(include=set(cls.model_fields)))


def create_server(default_timeout_s: float = sandbox.DEFAULT_TIMEOUT_S) -> DomainServer:
    server = DomainServer(
        "python", "Run Python 3 scripts (standard library only, no network, no files kept) and read their output."
    )

    @server.tool()
    def run_python(
        code: Annotated[str, Field(description="a complete Python 3 script; print() what you need to see")],
        timeout_s: Annotated[
            float, Field(description=f"wall-clock limit in seconds, at most {sandbox.MAX_TIMEOUT_S:g}")
        ] = default_timeout_s,
    ) -> RunOutput:
        """Run a Python script in a fresh sandbox and return its stdout, stderr and exit code."""
        return RunOutput.of(sandbox.run_python(code, timeout_s))

    return server
