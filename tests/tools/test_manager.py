import asyncio
import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mcprl.tools.config import ServerSpec, ServersConfig, load_servers_config
from mcprl.tools.errors import ConfigError
from mcprl.tools.manager import ToolManager

from tests.tools.conftest import fixture_spec


def run(coro):
    return asyncio.run(coro)


def test_happy_path_structured_and_scalar(fx_config):
    async def go():
        async with ToolManager(fx_config) as tm:
            assert {t.name for t in tm.tools()} >= {"add", "lookup", "sleep", "crash", "big", "fail", "pid"}
            assert tm.resolve("add").input_schema["required"] == ["a", "b"]  # schema from the server
            return await tm.execute_tool("add", {"a": 2, "b": 40}), await tm.execute_tool("lookup", {"key": "k"})

    added, looked = run(go())
    assert added["ok"] and added["data"] == 42 and added["latency_ms"] > 0
    assert looked["data"] == {"key": "k", "values": [0, 1, 2]}


def test_bad_input_never_raises(fx_config):
    async def go():
        async with ToolManager(fx_config) as tm:
            return [await tm.execute_tool(n, a) for n, a in [
                ("add", {"a": 1}), ("add", {"a": "one", "b": 2}), ("add", [1, 2]), ("ad", {"a": 1, "b": 2}),
                ("", {}), ("fail", {"reason": "nope"})]]

    missing, wrong_type, not_object, unknown, empty, failed = run(go())
    assert missing["error_type"] == "invalid_arguments" and "'b'" in missing["error"]
    assert wrong_type["error_type"] == "invalid_arguments" and "field 'a'" in wrong_type["error"]
    assert not_object["error_type"] == "invalid_arguments"
    assert unknown["error_type"] == "unknown_tool" and "did you mean 'add'" in unknown["error"]
    assert empty["error_type"] == "unknown_tool"
    assert failed["ok"] is False and failed["error_type"] == "tool_error"


def test_hanging_tool_times_out_within_budget(fx_config):
    async def go():
        async with ToolManager(fx_config) as tm:
            t0 = time.monotonic()
            result = await tm.execute_tool("sleep", {"seconds": 30}, timeout=1.0)
            elapsed = time.monotonic() - t0
            after = await tm.execute_tool("add", {"a": 1, "b": 1})
            return result, elapsed, after

    result, elapsed, after = run(go())
    assert result["ok"] is False and result["error_type"] == "timeout"
    assert elapsed < 1.0 + 1.0
    assert after["ok"], "the session survives a timed-out call"


def test_killed_server_restarts_on_next_call(fx_config):
    async def go():
        async with ToolManager(fx_config) as tm:
            pid = (await tm.execute_tool("pid"))["data"]
            os.kill(pid, signal.SIGKILL)
            await asyncio.sleep(0.3)
            after_kill = await tm.execute_tool("pid")
            crashed = await tm.execute_tool("crash")  # dies while handling the call
            after_crash = await tm.execute_tool("pid")
            return pid, after_kill, crashed, after_crash, tm.restarts()

    pid, after_kill, crashed, after_crash, restarts = run(go())
    assert after_kill["ok"] and after_kill["data"] != pid
    assert crashed["ok"] is False and crashed["error_type"] == "server_error"
    assert after_crash["ok"] and after_crash["data"] != after_kill["data"]
    assert restarts == {"fx": 2}


def test_oversized_result_truncated_with_marker():
    config = ServersConfig(servers=[fixture_spec(max_result_chars=500)])

    async def go():
        async with ToolManager(config) as tm:
            return await tm.execute_tool("big", {"n": 100_000})

    result = run(go())
    assert result["ok"] and result["truncated"]
    assert result["data"].startswith("x" * 500) and result["data"].endswith("[truncated 99500 chars]")


def test_namespacing_on_collision_and_qualified_names():
    config = ServersConfig(servers=[fixture_spec("one"), fixture_spec("two", tools=["add", "pid"])])

    async def go():
        async with ToolManager(config) as tm:
            names = {t.name for t in tm.tools()}
            return names, await tm.execute_tool("two.add", {"a": 1, "b": 2}), await tm.execute_tool("lookup", {"key": "z"})

    names, qualified, unique = run(go())
    assert {"one.add", "two.add", "one.pid", "two.pid", "lookup"} <= names
    assert "two.lookup" not in names and "add" not in names  # allow-list and collisions
    assert qualified["ok"] and qualified["server"] == "two"
    assert unique["ok"] and unique["server"] == "one"


def test_concurrent_calls_and_rate_limit():
    config = ServersConfig(servers=[fixture_spec(rate_limit_per_s=20)])

    async def go():
        async with ToolManager(config) as tm:
            t0 = time.monotonic()
            results = await asyncio.gather(*(tm.execute_tool("add", {"a": i, "b": i}) for i in range(20)))
            return results, time.monotonic() - t0

    results, elapsed = run(go())
    assert [r["data"] for r in results] == [2 * i for i in range(20)]
    assert elapsed >= 19 / 20 - 0.05  # 20 calls at 20/s take at least ~0.95 s


def test_streamable_http_transport(http_fixture_server):
    config = ServersConfig(servers=[ServerSpec(name="web", transport="http", url=http_fixture_server)])

    async def go():
        async with ToolManager(config) as tm:
            return await tm.execute_tool("add", {"a": 5, "b": 6}), await tm.execute_tool("nope", {})

    ok, bad = run(go())
    assert ok["ok"] and ok["data"] == 11 and ok["server"] == "web"
    assert bad["error_type"] == "unknown_tool"


def test_record_then_replay_without_servers(fx_config, tmp_path):
    rec = tmp_path / "calls.jsonl"

    async def record():
        async with ToolManager(fx_config, mode="record", recording=rec) as tm:
            return [await tm.execute_tool("add", {"a": 1, "b": 2}), await tm.execute_tool("lookup", {"key": "q"})]

    async def replay():
        broken = ServersConfig(servers=[ServerSpec(name="fx", command="/nonexistent/server")])
        async with ToolManager(broken, mode="replay", recording=rec) as tm:
            return ([await tm.execute_tool("add", {"a": 1, "b": 2}), await tm.execute_tool("lookup", {"key": "q"}),
                     await tm.execute_tool("add", {"a": 9, "b": 9})], tm.restarts())

    recorded = run(record())
    replayed, restarts = run(replay())
    for a, b in zip(recorded, replayed[:2]):
        assert {k: v for k, v in a.items() if k != "latency_ms"} == {k: v for k, v in b.items() if k != "latency_ms"}
    assert replayed[2]["error_type"] == "not_recorded"
    lines = [json.loads(x) for x in rec.read_text().splitlines()]
    assert lines[0]["type"] == "tools" and sum(x["type"] == "call" for x in lines) == 2


def test_sync_facade_from_worker_threads(fx_config):
    from mcprl.tools.sync import SyncToolManager

    with SyncToolManager(fx_config) as tm:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: tm.execute_tool("add", {"a": i, "b": 1}), range(32)))
        assert [r["data"] for r in results] == [i + 1 for i in range(32)]
        assert tm.manager.restarts() == {"fx": 0}  # one server process served every thread


def test_start_failure_is_a_result_not_an_exception():
    config = ServersConfig(servers=[ServerSpec(name="ghost", command=sys.executable, args=["-c", "import sys; sys.exit(1)"],
                                               retries=0)])

    async def go():
        tm = ToolManager(config)
        try:
            return await tm.execute_tool("anything", {})
        finally:
            await tm.close()

    result = run(go())
    assert result["ok"] is False and result["error_type"] == "server_error"
    assert "ghost" in result["error"] and "failed to start" in result["error"]


def test_reference_server_from_pypi_mcp_server_time():
    config = ServersConfig(servers=[ServerSpec(name="time", command=sys.executable, args=["-m", "mcp_server_time"])])

    async def go():
        async with ToolManager(config) as tm:
            names = {t.name for t in tm.tools()}
            return names, await tm.execute_tool("convert_time", {"source_timezone": "UTC", "time": "12:00",
                                                                   "target_timezone": "Asia/Tokyo"})

    names, result = run(go())
    assert {"get_current_time", "convert_time"} <= names
    assert result["ok"], result
    assert "21:00" in json.dumps(result["data"])


def test_config_errors_are_clear(tmp_path):
    bad = tmp_path / "servers.yaml"
    bad.write_text("servers:\n  - {name: x, transport: http}\n")
    with pytest.raises(ConfigError, match="needs `url`"):
        load_servers_config(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_servers_config(tmp_path / "missing.yaml")
    (tmp_path / "third.yaml").write_text(
        "servers:\n  - {name: time, transport: stdio, command: python, args: [-m, mcp_server_time]}\n")
    assert load_servers_config(tmp_path / "third.yaml").servers[0].args == ["-m", "mcp_server_time"]


def test_our_stdio_servers_inherit_pythonpath(monkeypatch, tmp_path):
    """The SDK spawns stdio servers with a minimal environment; ours must still import what we import."""
    from mcprl.tools.config import our_server_spec

    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert our_server_spec("polygon").resolved_env() == {"PYTHONPATH": str(tmp_path)}
    monkeypatch.delenv("PYTHONPATH")
    assert our_server_spec("polygon").resolved_env() == {}


def test_text_that_cannot_be_encoded_is_refused_before_it_reaches_the_server(fx_config):
    """A model's lone surrogate (`"\\udcff"`) used to break the stdio stream: every call in flight on that
    server failed and the server restarted (the offline Slack lost every episode's posts). It is an
    invalid-arguments result now, and the calls in flight beside it, and the server, are untouched."""
    async def go():
        async with ToolManager(fx_config) as tm:
            pid = (await tm.execute_tool("pid", {}))["data"]
            slow = asyncio.create_task(tm.execute_tool("sleep", {"seconds": 0.5}))
            await asyncio.sleep(0.1)
            bad = await tm.execute_tool("lookup", {"key": "caf\udcff"})
            nested = await tm.execute_tool("lookup", {"key": "k", "extra": ["\ud800"]})
            return bad, nested, await slow, (await tm.execute_tool("pid", {}))["data"] == pid, tm.restarts()

    bad, nested, slow, same_server, restarts = run(go())
    assert bad["ok"] is False and bad["error_type"] == "invalid_arguments"
    assert "not valid Unicode" in bad["error"] and "nothing was sent" in bad["error"]
    assert nested["error_type"] == "invalid_arguments"
    assert slow["ok"] and same_server and not any(restarts.values())
    json.dumps(bad).encode("utf-8")  # the observation built from it is itself sendable


def test_a_tool_that_keeps_its_own_time_answers_before_the_client_gives_up():
    """run_python stops itself at its `timeout_s` and reports the partial output; the client used to give up at
    the same moment (both 10 s) and return a bare transport timeout (issue 49, finding 5). It waits for the
    tool's own limit plus a grace now, whatever its own timeout says."""
    from mcprl.tools.config import our_server_spec

    async def go():
        async with ToolManager(ServersConfig(servers=[our_server_spec("python")])) as tm:
            return await tm.execute_tool("run_python", {"code": "import time\nprint('partial', flush=True)\n"
                                                                "time.sleep(30)", "timeout_s": 2}, timeout=1)

    result = run(go())
    assert result["ok"], result
    assert result["data"]["stdout"] == "partial\n" and "time limit" in result["data"]["stderr"]
    assert result["data"]["exit_code"] != 0 and result["latency_ms"] < 7000


def test_a_server_that_hangs_at_start_fails_after_its_startup_timeout():
    """A server stuck before initialize used to cost a fixed 60 s and retries (76 s seen) with no way to
    shorten it (issue 49, finding 7); `startup_timeout_s` sets it, and a hung start is not retried."""
    spec = ServerSpec(name="hang", command=sys.executable, args=["-c", "import time; time.sleep(60)"],
                      startup_timeout_s=1)

    async def go():
        async with ToolManager(ServersConfig(servers=[spec])):
            pass  # starting is what fails

    t0 = time.perf_counter()
    with pytest.raises(Exception, match=r"did not finish starting within 1 s \(startup_timeout_s"):
        run(go())
    assert time.perf_counter() - t0 < 10


@pytest.mark.parametrize("tool, says", [("garble", "no valid JSON-RPC message"), ("null_result", "no valid JSON-RPC message"),
                                        ("wrong_id", "request id 10005, which was never sent")])
def test_a_malformed_reply_is_reported_at_once_not_as_a_timeout(tool, says):
    """A line that is not JSON-RPC, a null result or a reply for an id never sent used to leave its call
    waiting for the whole timeout and then read as a timeout (issue 49, finding 8). With the call alone in
    flight the line is its reply: it fails at once, as a server error that says so."""
    from pathlib import Path

    garbling = str(Path(__file__).with_name("garbling_server.py"))

    async def go():
        async with ToolManager(ServersConfig(servers=[ServerSpec(name="g", command=sys.executable,
                                                                 args=[garbling])])) as tm:
            t0 = time.perf_counter()
            # the id of the fifth request: initialize, tools/list, then this call after two of its own
            for _ in range(2):
                await tm.execute_tool("null_result", {}, timeout=30)
            garbled = await tm.execute_tool(tool, {}, timeout=30)
            return garbled, time.perf_counter() - t0, tm._conns["g"].malformed_replies

    garbled, seconds, counted = run(go())
    assert garbled["ok"] is False and garbled["error_type"] == "server_error", garbled
    assert "malformed reply from server 'g'" in garbled["error"] and says in garbled["error"], garbled
    assert seconds < 10 and counted == 3


def test_a_large_run_python_result_keeps_its_fields():
    """Issue 49, finding 8: a large output reached the model as a cut JSON string, exit code and stderr lost."""
    from mcprl.tools.config import our_server_spec

    code = "import sys\nprint('o' * 3990)\nprint('e' * 3990 + 'END', file=sys.stderr)\nsys.exit(3)"

    async def go():
        async with ToolManager(ServersConfig(servers=[our_server_spec("python", "stdio")])) as tm:
            return await tm.execute_tool("run_python", {"code": code})

    result = run(go())
    data = result["data"]
    assert result["ok"] and result["truncated"] and isinstance(data, dict), result
    assert data["exit_code"] == 3 and data["timed_out"] is False and data["stderr"].endswith("END\n")
    assert "characters truncated" in data["stdout"] + data["stderr"]
    assert len(json.dumps(data, ensure_ascii=False)) <= our_server_spec("python", "stdio").max_result_chars
