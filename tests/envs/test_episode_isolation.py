"""Episodes on the real Slack server (stdio): each sees its own posts only, and its results do not depend on others."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal

import pytest
import skyrl_gym
import yaml

import mcprl.envs  # noqa: F401 - registers mcp_tool_env
from mcprl.protocol.parsing import format_tool_call
from mcprl.tools.config import ServersConfig, our_server_spec
from mcprl.tools.manager import ToolManager


@pytest.fixture(scope="module")
def slack_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "servers.yaml"
    config = ServersConfig(servers=[our_server_spec("slack", "stdio")])
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    return str(path)


def episode(slack_config):
    gt = {"task_id": "slack-iso", "complexity": "simple", "max_turns": 5, "success": {"must_call_tool": "post_message"},
          "tool_sequence": [{"step": 1, "server": "slack", "tool": "post_message",
                             "params": {"channel": "general", "text": "zebra-9 hedge closed"}}],
          "limits": {"max_servers": 1, "max_tools": 4}, "answer": "posted"}
    env = skyrl_gym.make("mcp_tool_env", env_config={"servers_config": slack_config},
                         extras={"reward_spec": {"method": "rule", "ground_truth": gt}, "extra_info": {}})
    env.init([{"role": "user", "content": "Post that the zebra-9 hedge is closed."}])
    return env


def observe(env, tool: str, **arguments) -> dict:
    content = env.step(format_tool_call(tool, arguments))["observations"][0]["content"]
    return json.loads(re.search(r"<tool_response>\s*(.*?)\s*</tool_response>", content, re.S).group(1))


def test_episodes_do_not_see_each_others_posts(slack_config):
    first, second = episode(slack_config), episode(slack_config)
    assert first.episode != second.episode
    posted = observe(first, "post_message", channel="general", text="zebra-9 hedge closed")
    assert observe(second, "search_messages", query="zebra-9")["total"] == 0
    assert observe(first, "search_messages", query="zebra-9")["matches"][0]["ts"] == posted["ts"]
    newest = observe(second, "get_channel_history", channel="general", limit=1)["messages"][0]
    assert "zebra-9" not in newest["text"]

    # A later episode that makes the same calls gets the same results: nothing carried over from the first.
    again = episode(slack_config)
    assert observe(again, "post_message", channel="general", text="zebra-9 hedge closed") == posted
    assert observe(again, "search_messages", query="zebra-9")["total"] == 1


def _server_pid(state_dir) -> int:
    """The server process a connection started: the one given that connection's state directory."""
    marker = f"MCPRL_STATE_DIR={state_dir}".encode()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    return int(entry)
        except OSError:
            continue
    raise AssertionError(f"no server with {marker!r}")


def test_a_server_crash_loses_no_episodes_posts(slack_config):
    """Issue 49, finding 3: a restart of the offline Slack used to drop every episode's posts."""

    async def go():
        async with ToolManager(slack_config) as tm:
            posted = [await tm.execute_tool("post_message", {"channel": "general", "text": f"kiwi-{i} done"},
                                            episode=f"ep{i}") for i in range(3)]
            pid = _server_pid(tm._conns["slack"]._state_dir)
            os.kill(pid, signal.SIGKILL)
            await asyncio.sleep(0.3)
            found = [await tm.execute_tool("search_messages", {"query": f"kiwi-{i}"}, episode=f"ep{i}") for i in range(3)]
            later = await tm.execute_tool("post_message", {"channel": "general", "text": "kiwi-0 again"}, episode="ep0")
            other = await tm.execute_tool("search_messages", {"query": "kiwi-1"}, episode="ep0")
            return posted, found, later, other, tm.restarts()

    posted, found, later, other, restarts = asyncio.run(go())
    assert restarts == {"slack": 1}
    for sent, hit in zip(posted, found):
        assert hit["ok"] and hit["data"]["total"] == 1 and hit["data"]["matches"][0]["ts"] == sent["data"]["ts"]
    assert float(later["data"]["ts"]) == float(posted[0]["data"]["ts"]) + 1  # the episode's second post, as without a crash
    assert other["data"]["total"] == 0  # still each episode's own
