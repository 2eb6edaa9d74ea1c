"""Configs, the registry and the CLI; tool outputs identical across fresh server instances."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcprl.servers.errors import InvalidArgumentError, NotFoundError
from mcprl.servers.registry import ADMIN_TOOLS, SERVER_NAMES, build_server, load_server_config

from .helpers import connect

ROOT = Path(__file__).resolve().parents[2]
PORTS = {"polygon": 7001, "fmp": 7002, "tavily": 7003, "python": 7004, "slack": 7005}
ENV_VARS = {"polygon": "POLYGON_API_KEY", "fmp": "FMP_API_KEY", "tavily": "TAVILY_API_KEY", "slack": "SLACK_BOT_TOKEN"}

# Valid arguments for every data tool (the python server is not deterministic: it reports durations).
CALLS = {
    "polygon": [
        ("get_last_quote", {"ticker": "NVDA"}),
        ("get_daily_bars", {"ticker": "NVDA", "start_date": "2025-03-01", "end_date": "2025-03-31"}),
        ("get_previous_close", {"ticker": "NVDA"}),
        ("get_ticker_details", {"ticker": "NVDA"}),
    ],
    "fmp": [
        ("get_company_profile", {"symbol": "WMT"}),
        ("get_quote", {"symbol": "WMT"}),
        ("get_income_statement", {"symbol": "WMT", "period": "quarter"}),
        ("get_key_metrics", {"symbol": "WMT", "limit": 3}),
        ("get_ratios", {"symbol": "WMT", "limit": 3}),
    ],
    "tavily": [("search", {"query": "Walmart quarterly revenue"}), ("extract", {"urls": ["https://example.com/x"]})],
    "slack": [
        ("list_channels", {}),
        ("post_message", {"channel": "markets", "text": "WMT looks strong"}),
        ("get_channel_history", {"channel": "markets", "limit": 5}),
        ("search_messages", {"query": "WMT"}),
        ("reset_workspace", {}),
    ],
}


def _tool_names(name: str) -> list[str]:
    return [t.name for t in anyio.run(build_server(name).list_tools)]


async def _tools_and_outputs(name: str, seed: int = 0) -> tuple[dict[str, float], list[dict]]:
    async with Client(build_server(name, seed=seed)) as client:
        tools = (await client.list_tools()).tools
        outputs = []
        for tool, args in CALLS.get(name, []):
            result = await client.call_tool(tool, args)
            assert not result.is_error, result.content[0].text
            outputs.append(result.structured_content)
        return [t.name for t in tools], outputs


@pytest.mark.parametrize("name", SERVER_NAMES)
def test_config_matches_the_server(name):
    config = load_server_config(name)
    assert config.name == name and config.port == PORTS[name] and config.timeout_s > 0
    tools = _tool_names(name)
    assert sorted(config.rate_limits) == sorted(tools), "every tool needs a rate-limit hint, and only tools"
    if name == "python":
        assert config.credentials is None and config.base_url is None
    else:
        assert config.credentials.env == ENV_VARS[name] and config.base_url.startswith("https://")
    assert set(ADMIN_TOOLS.get(name, ())) <= set(tools)


@pytest.mark.parametrize("name", SERVER_NAMES)
def test_repository_configs_are_the_packaged_files(name):
    user_facing = ROOT / "mcp_servers" / "configs" / f"{name}.yaml"
    packaged = ROOT / "src" / "mcprl" / "servers" / "configs" / f"{name}.yaml"
    assert user_facing.resolve() == packaged.resolve()


@pytest.mark.parametrize("name", sorted(CALLS))
def test_fresh_instances_give_identical_outputs(name):
    first, second = anyio.run(_tools_and_outputs, name), anyio.run(_tools_and_outputs, name)
    assert first == second
    assert anyio.run(_tools_and_outputs, name, 1)[1] != first[1]


def test_registry_refuses_unknown_names():
    with pytest.raises(NotFoundError, match=r"unknown server 'slak': did you mean 'slack'\?"):
        build_server("slak")
    with pytest.raises(InvalidArgumentError, match="unknown backend 'remote'"):
        build_server("fmp", backend="remote")


def test_docs_list_every_tool():
    docs = (ROOT / "docs" / "servers.md").read_text()
    for name in SERVER_NAMES:
        for tool in _tool_names(name):
            assert f"`{tool}`" in docs, f"docs/servers.md does not describe {name}.{tool}"


def test_main_cli_entry_point_serves_over_stdio():
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "mcprl.cli", "servers", "serve", "python"])
    with connect(stdio_client(params)) as session:
        assert session.ok("run_python", code="print(6 * 7)")["stdout"] == "42\n"


def test_cli_reports_a_missing_key_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "TAVILY_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "mcprl.servers", "tavily", "--backend", "live"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "error: TAVILY_API_KEY is not set: export it to use --backend live, or use --backend offline"
