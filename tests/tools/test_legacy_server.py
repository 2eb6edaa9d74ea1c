"""The ToolManager talks to a server built on the 1.x SDK, run from its own environment.

mcp-server-sqlite requires mcp<2 (it crashes beside mcp 2.x), so it gets a venv of its own in the
cache; the client here is the 2.x SDK. Slow: the first run installs that venv from PyPI.
"""

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from mcprl.tools.config import ServerSpec, ServersConfig
from mcprl.tools.manager import ToolManager
from mcprl.models.loading import cache_dir


def legacy_venv() -> Path:
    venv = cache_dir() / "venv-mcp1-sqlite"
    exe = venv / "bin" / "mcp-server-sqlite"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "mcp<2", "mcp-server-sqlite==2025.4.25"], check=True)
    return exe


@pytest.mark.slow
def test_v1_sdk_server_from_its_own_venv(tmp_path):
    exe = legacy_venv()
    config = ServersConfig(servers=[ServerSpec(name="sqlite", command=str(exe), args=["--db-path", str(tmp_path / "t.db")])])

    async def go():
        async with ToolManager(config) as tm:
            names = {t.name for t in tm.tools()}
            created = await tm.execute_tool("create_table", {"query": "CREATE TABLE t (id INTEGER, name TEXT)"})
            written = await tm.execute_tool("write_query", {"query": "INSERT INTO t VALUES (1, 'x'), (2, 'y')"})
            read = await tm.execute_tool("read_query", {"query": "SELECT name FROM t ORDER BY id"})
            bad = await tm.execute_tool("read_query", {})
            return names, created, written, read, bad

    names, created, written, read, bad = asyncio.run(go())
    assert {"read_query", "write_query", "create_table", "list_tables"} <= names
    assert created["ok"] and written["ok"], (created, written)
    assert read["ok"] and "'x'" in str(read["data"]) and "'y'" in str(read["data"])
    assert bad["error_type"] == "invalid_arguments"
