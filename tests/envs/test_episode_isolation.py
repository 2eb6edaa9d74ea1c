"""Episodes on the real Slack server (stdio): each sees its own posts only, and its results do not depend on others."""

from __future__ import annotations

import json
import re

import pytest
import skyrl_gym
import yaml

import mcprl.envs  # noqa: F401 - registers mcp_tool_env
from mcprl.protocol.parsing import format_tool_call
from mcprl.tools.config import ServersConfig, our_server_spec


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
