"""The slack server over streamable HTTP on a free 127.0.0.1 port, every tool called."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from mcp.client.streamable_http import streamable_http_client

from .helpers import connect, free_port


@pytest.fixture(scope="module")
def slack_http():
    port = free_port()
    cmd = [sys.executable, "-m", "mcprl.servers", "slack", "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.communicate()[1].decode()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "server did not listen within 30 s"
                time.sleep(0.05)
        with connect(streamable_http_client(f"http://127.0.0.1:{port}/mcp")) as session:
            yield session
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert out == b"", "the server printed to stdout"


def test_every_slack_tool_over_http(slack_http):
    s = slack_http
    assert s.tool_names() == ["list_channels", "post_message", "get_channel_history", "search_messages", "reset_workspace"]
    assert len(s.ok("list_channels")["channels"]) == 8
    posted = s.ok("post_message", channel="#research", text="HTTP transport check: walrus-7")
    history = s.ok("get_channel_history", channel="research", limit=1)
    assert history["messages"][0]["ts"] == posted["ts"]
    assert s.ok("search_messages", query="walrus-7")["total"] == 1
    assert s.ok("reset_workspace")["messages"] > 0
    assert s.ok("search_messages", query="walrus-7")["total"] == 0
    assert "archived" in s.error("post_message", channel="q3-planning-2024", text="hi")
