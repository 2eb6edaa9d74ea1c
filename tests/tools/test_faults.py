"""Injected faults (`rollout.faults`, `mcprl eval run --faults`): seeded, at the rates asked, and read by
the agent exactly as the real failure of that kind (issue 49)."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path

import pytest

from mcprl.tools.config import ServerSpec, ServersConfig
from mcprl.tools.faults import FAULT_KINDS, FaultConfig
from mcprl.tools.manager import ToolManager
from tests.tools.conftest import fixture_spec


def test_the_same_seed_puts_the_same_faults_on_the_same_calls():
    faults = FaultConfig(timeout=0.2, server_error=0.1, seed=7)
    draws = [faults.draw(f"task{t}", c, "s", "tool") for t in range(50) for c in range(6)]
    assert draws == [FaultConfig(timeout=0.2, server_error=0.1, seed=7).draw(f"task{t}", c, "s", "tool")
                     for t in range(50) for c in range(6)]
    assert draws != [FaultConfig(timeout=0.2, server_error=0.1, seed=8).draw(f"task{t}", c, "s", "tool")
                     for t in range(50) for c in range(6)]


def test_rates_are_honoured_and_filters_apply():
    faults = FaultConfig(**{kind: 0.1 for kind in FAULT_KINDS}, servers=["finance"], tools=["quote", "history"])
    counts = Counter(faults.draw(f"t{t}", c, "finance", "quote") for t in range(1000) for c in range(5))
    for kind in FAULT_KINDS:
        assert abs(counts[kind] / 5000 - 0.1) < 0.02, counts
    assert faults.draw("t1", 0, "slack", "quote") is None and faults.draw("t1", 0, "finance", "post") is None
    assert not FaultConfig().active and FaultConfig().draw("t", 0, "s", "x") is None


@pytest.mark.parametrize("spec, says", [("timeout=0.7,crash=0.5", "add up to 1.2"), ("timeout=2", "from 0 to 1"),
                                        ("tiemout=0.1", "not KIND=RATE"), ("timeout=lots", "not a number")])
def test_bad_fault_settings_are_refused(spec, says):
    with pytest.raises(ValueError, match=says):
        FaultConfig.parse(spec)


def run(coro):
    return asyncio.run(coro)


def test_each_injected_fault_reads_as_the_real_failure():
    garbling = str(Path(__file__).with_name("garbling_server.py"))
    config = ServersConfig(servers=[fixture_spec(timeout_s=1.0),
                                    ServerSpec(name="g", command=sys.executable, args=[garbling])])

    async def go():
        async with ToolManager(config) as tm:
            out = {"timeout": (await tm.execute_tool("sleep", {"seconds": 5}),
                               await tm.execute_tool("sleep", {"seconds": 5}, fault="timeout")),
                   "malformed": (await tm.execute_tool("garble", {}),
                                 await tm.execute_tool("garble", {}, fault="malformed")),
                   "crash": (await tm.execute_tool("crash", {}), await tm.execute_tool("add", {"a": 1, "b": 2}, fault="crash")),
                   "truncated": (await tm.execute_tool("big", {"n": 1000}),
                                 await tm.execute_tool("big", {"n": 1000}, fault="truncated"))}
            out["server_error"] = (None, await tm.execute_tool("add", {"a": 1, "b": 2}, fault="server_error"))
            out["rate_limit"] = (None, await tm.execute_tool("add", {"a": 1, "b": 2}, fault="rate_limit"))
            out["unknown"] = await tm.execute_tool("nope", {}, fault="timeout")
            return out

    out = run(go())
    real, injected = out["timeout"]
    assert (injected["ok"], injected["error"], injected["error_type"]) == (real["ok"], real["error"], real["error_type"])
    assert injected["injected_fault"] == "timeout" and "injected_fault" not in real
    assert injected["latency_ms"] < 500 < real["latency_ms"]  # nothing is waited for
    real, injected = out["malformed"]
    assert injected["error_type"] == real["error_type"] == "server_error"
    prefix = "'garble': malformed reply from server 'g': a line that is no valid JSON-RPC message ("
    assert real["error"].startswith(prefix) and injected["error"].startswith(prefix)
    real, injected = out["crash"]
    assert injected["error_type"] == real["error_type"] == "server_error"
    assert real["error"].startswith("server 'fx' connection lost: ") and injected["error"].startswith("server 'fx' connection lost: ")
    real, injected = out["truncated"]
    assert injected["ok"] and injected["truncated"] and injected["data"].startswith(real["data"][:400])
    assert len(real["data"]) // 2 <= len(injected["data"]) < len(real["data"]) and injected["data"].endswith("chars]")
    assert out["server_error"][1]["error"] == "'add' failed: Internal error"
    assert "rate limit reached (HTTP 429)" in out["rate_limit"][1]["error"]
    assert out["unknown"]["error_type"] == "unknown_tool" and "injected_fault" not in out["unknown"]
