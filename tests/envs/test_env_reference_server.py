"""MCPToolEnv over a third-party reference MCP server from PyPI (mcp-server-time)."""

import sys

import pytest
import skyrl_gym

import mcprl.envs  # noqa: F401 - registers mcp_tool_env
from mcprl.protocol.parsing import format_answer, format_tool_call


@pytest.fixture(scope="module")
def time_servers(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "servers.yaml"
    path.write_text(f"servers:\n  - {{name: time, transport: stdio, command: {sys.executable}, args: [-m, mcp_server_time]}}\n")
    return str(path)


def make_env(servers_config, **gt_overrides):
    gt = {"task_id": "time-1", "complexity": "simple", "max_turns": 3,
          "success": {"must_call_tool": "convert_time"},
          "tool_sequence": [{"step": 1, "server": "time", "tool": "convert_time",
                             "params": {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}}],
          "limits": {"max_servers": 1, "max_tools": 2}, "answer": "21:00", **gt_overrides}
    return skyrl_gym.make("mcp_tool_env", env_config={"servers_config": servers_config},
                          extras={"reward_spec": {"method": "rule", "ground_truth": gt}, "extra_info": {}})


def test_scripted_correct_episode(time_servers):
    env = make_env(time_servers)
    prompt = [{"role": "system", "content": "tools..."}, {"role": "user", "content": "Noon UTC in Tokyo?"}]
    messages, meta = env.init(prompt)
    assert messages == prompt and meta["task_id"] == "time-1"
    call = format_tool_call("convert_time", {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"})
    out = env.step(call)
    assert out["done"] is False and out["reward"] > 0
    assert out["observations"][0]["role"] == "user"
    assert out["observations"][0]["content"].startswith("<tool_response>") and "21:00" in out["observations"][0]["content"]
    final = env.step(format_answer("21:00"))
    assert final["done"] is True and final["metadata"]["task_complete"] is True
    assert final["reward"] == pytest.approx(1.0)
    metrics = env.get_metrics()
    assert metrics["success"] and metrics["tool_calls"] == 1 and metrics["tool_ok"] == 1 and metrics["turns"] == 2
    assert [t["kind"] for t in metrics["trace"]] == ["tool_call", "answer"]


def test_errors_become_observations_and_max_turns_ends(time_servers):
    env = make_env(time_servers)
    env.init([{"role": "user", "content": "q"}])
    steps = [env.step(a) for a in ['<tool_call>{"name": "convert_tim", "arguments": {}}</tool_call>',
                                   '<tool_call>{"name": "convert_time", "arguments": {"time": 5}}</tool_call>',
                                   "I think it is late."]]
    unknown, invalid, prose = steps
    assert "did you mean 'convert_time'" in unknown["observations"][0]["content"] and unknown["reward"] < 0
    assert "invalid arguments" in invalid["observations"][0]["content"] and invalid["reward"] <= 0  # penalty cap
    assert prose["done"] is True and prose["observations"] == []  # max_turns=3 reached
    agg = type(env).aggregate_metrics([env.get_metrics()])
    assert agg["tool_calls"] == 2 and agg["unknown_tool_rate"] == 0.5 and agg["success"] == 0.0


def test_idle_turns_end_the_episode(time_servers):
    env = skyrl_gym.make("mcp_tool_env", env_config={"servers_config": time_servers, "max_idle_turns": 2},
                         extras={"reward_spec": {"method": "rule", "ground_truth": {"max_turns": 6}}})
    env.init([{"role": "user", "content": "q"}])
    first = env.step("Let me think about time zones.")
    assert first["done"] is False and "No tool call" in first["observations"][0]["content"]
    broken = env.step('<tool_call>{"name": "convert_time", </tool_call>')  # malformed: an attempt, not idle
    assert broken["done"] is False
    assert env.step("Still thinking.")["done"] is False
    last = env.step("Tokyo is nice.")
    assert last["done"] is True and last["observations"] == [] and env.get_metrics()["turns"] == 4


def test_disallowed_tool_refused(time_servers):
    env = make_env(time_servers, allowed_tools=["convert_time"])
    env.init([{"role": "user", "content": "q"}])
    out = env.step(format_tool_call("get_current_time", {"timezone": "UTC"}))
    assert "not available here" in out["observations"][0]["content"]
    assert out["metadata"]["error_type"] == "disallowed_tool" and out["reward"] < 0


def test_parquet_style_extras_and_tool_role(time_servers):
    import json

    env = skyrl_gym.make("mcp_tool_env", env_config={"servers_config": time_servers, "observation_role": "tool"},
                         extras={"reward_spec": json.dumps({"method": "rule", "ground_truth": {
                             "task_id": "t", "max_turns": 2, "success": {"must_call_tool": "get_current_time"},
                             "tool_sequence": [], "answer": None}}), "extra_info": "{}", "max_turns": 8})
    assert env.max_turns == 2
    env.init([{"role": "user", "content": "q"}])
    out = env.step(format_tool_call("get_current_time", {"timezone": "UTC"}))
    assert out["observations"][0]["role"] == "tool"


def test_bad_env_config_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown env_config keys"):
        skyrl_gym.make("mcp_tool_env", env_config={"servers_cfg": "x"}, extras={})


@pytest.mark.parametrize(("reward_spec", "problem"), [
    ('{"method": "rule", "ground_truth": {"task_id": "t"', "reward_spec is not valid JSON"),
    ({"method": "rule", "ground_truth": "[1, 2]"}, "reward_spec.ground_truth must be a mapping, got list"),
    ({"method": "rule", "ground_truth": {"task_id": 7, "max_turns": "two", "allowed_tools": "convert_time"}}, None),
])
def test_a_row_whose_ground_truth_cannot_be_read_runs_and_says_why(time_servers, reward_spec, problem):
    """The env never raises (one exception aborts SkyRL's whole batch): an unreadable ground truth is an
    episode with nothing to score, and its metrics say why; wrong-typed fields take their defaults."""
    env = skyrl_gym.make("mcp_tool_env", env_config={"servers_config": time_servers},
                         extras={"reward_spec": reward_spec, "extra_info": "{not json", "max_turns": 2})
    _, info = env.init([{"role": "user", "content": "What time is it in UTC?"}])
    said = info.get("ground_truth_problem")
    assert (said is None if problem is None else said.startswith(problem)) and env.max_turns == 2
    out = env.step(format_tool_call("get_current_time", {"timezone": "UTC"}))
    assert not out["done"] and out["observations"]
    out = env.step(format_answer("noon"))
    assert out["done"] and not env.success
    assert env.get_metrics().get("ground_truth_problem") == said
