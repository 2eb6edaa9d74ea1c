"""Real MCP servers for data tests (the tool-layer fixture server as `fx`, the PyPI time server as
`time`), started once per session on one long-lived loop, since each start costs seconds."""

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mcprl.aio import LoopThread
from mcprl.tools.config import ServerSpec, ServersConfig
from mcprl.tools.manager import ToolManager

FIXTURE = str(Path(__file__).parents[1] / "tools" / "fixture_server.py")


def servers_config() -> ServersConfig:
    return ServersConfig(servers=[
        ServerSpec(name="fx", command=sys.executable, args=[FIXTURE], timeout_s=5.0),
        ServerSpec(name="time", command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
                   timeout_s=5.0),
    ])


@dataclass
class Live:
    tm: ToolManager
    loop: LoopThread

    def run(self, coro):
        return self.loop.run(coro, timeout=120)


@pytest.fixture(scope="session")
def live():
    loop = LoopThread(name="data-tests")
    tm = ToolManager(servers_config())
    loop.run(tm.start())
    yield Live(tm, loop)
    loop.run(tm.close())
    loop.close()


@pytest.fixture
def servers_yaml(tmp_path) -> Path:
    """The same servers as a config file, for CLI tests."""
    import yaml

    path = tmp_path / "servers.yaml"
    path.write_text(yaml.safe_dump(servers_config().model_dump(exclude_defaults=True)))
    return path
