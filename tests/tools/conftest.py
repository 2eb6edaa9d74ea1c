import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mcprl.tools.config import ServerSpec, ServersConfig

FIXTURE = str(Path(__file__).with_name("fixture_server.py"))


def fixture_spec(name: str = "fx", **kw) -> ServerSpec:
    return ServerSpec(name=name, transport="stdio", command=sys.executable, args=[FIXTURE], **kw)


@pytest.fixture
def fx_config() -> ServersConfig:
    # 10 s, not 2: a loaded 2-core CI machine once took over 2 s for an ordinary call (a test that needs a
    # timeout passes its own).
    return ServersConfig(servers=[fixture_spec(timeout_s=10.0)])


def wait_http(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=0.5)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise TimeoutError(f"{url} did not come up")


@pytest.fixture
def http_fixture_server(port):
    proc = subprocess.Popen([sys.executable, FIXTURE, "http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_http(url)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
