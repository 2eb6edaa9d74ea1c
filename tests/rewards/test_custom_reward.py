"""A custom reward is a class in the user's own module plus one config line: `reward.fn: module:Class`.

The env builds it, tells it every step and why the episode stopped; a bad entry fails at config load."""

from __future__ import annotations

import sys
import textwrap

import pytest
import skyrl_gym
import yaml

import mcprl.envs  # noqa: F401 - registers mcp_tool_env
from mcprl.errors import ConfigError
from mcprl.protocol.parsing import format_answer, format_tool_call
from mcprl.rewards.base import RewardFn, RewardSettings
from mcprl.rewards.registry import build_reward
from mcprl.tools.config import ServersConfig, our_server_spec
from mcprl.training.config import load_train_config

MODULE = '''
from mcprl.rewards.base import NO_REWARD, Reward

class CallBonus:
    """+bonus per successful tool call, 1 for an answer that names the ticker, -0.5 for stopping unanswered."""

    def __init__(self, bonus=0.1):
        self.bonus, self.log = bonus, []

    def reset(self, ground_truth):
        self.ticker = ground_truth["ticker"]

    def step(self, step):
        self.log.append(step.parsed.kind)
        if step.parsed.kind == "answer":
            return Reward(1.0 if self.ticker in step.parsed.answer else 0.0, {"named": 1.0}, task_complete=True)
        ok = bool(step.result and step.result.get("ok"))
        return Reward(self.bonus if ok else 0.0, {"call": self.bonus if ok else 0.0})

    def end(self, reason):
        self.log.append(reason)
        return NO_REWARD if reason == "answered" else Reward(-0.5, {"unanswered": -0.5})
'''


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_rewards"
    sys.modules.pop("my_rewards", None)


@pytest.fixture(scope="module")
def polygon_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "servers.yaml"
    path.write_text(yaml.safe_dump(ServersConfig(servers=[our_server_spec("polygon", "stdio")]).model_dump(mode="json")))
    return str(path)


def _env(polygon_config, fn, options, max_turns=3):
    gt = {"task_id": "custom-1", "max_turns": max_turns, "ticker": "AAPL"}
    env = skyrl_gym.make("mcp_tool_env", env_config={"servers_config": polygon_config, "reward_fn": fn,
                                                     "reward_options": options},
                         extras={"reward_spec": {"method": "rule", "ground_truth": gt}, "extra_info": {}})
    env.init([{"role": "user", "content": "What is Apple's last trade?"}])
    return env


def test_the_env_runs_a_users_reward_class(user_module, polygon_config):
    env = _env(polygon_config, f"{user_module}:CallBonus", {"bonus": 0.25})
    call = env.step(format_tool_call("get_last_quote", {"ticker": "AAPL"}))
    assert call["reward"] == pytest.approx(0.25) and not call["done"]
    answer = env.step(format_answer("AAPL trades at 187.42"))
    assert answer["done"] and answer["reward"] == pytest.approx(1.0)
    assert answer["metadata"]["stop_reason"] == "answered" and env.get_metrics()["success"] is True
    assert env.reward_fn.log == ["tool_call", "answer", "answered"]


def test_the_terminal_reward_comes_with_the_stop_reason(user_module, polygon_config):
    env = _env(polygon_config, f"{user_module}:CallBonus", {}, max_turns=1)
    out = env.step(format_tool_call("get_last_quote", {"ticker": "AAPL"}))
    assert out["done"] and out["metadata"]["stop_reason"] == "max_turns"
    assert out["reward"] == pytest.approx(0.1 - 0.5)
    assert out["metadata"]["reward_components"] == {"call": 0.1, "unanswered": -0.5}


def test_one_config_line_and_bad_entries_fail_at_load(user_module, tmp_path):
    cfg = load_train_config(None, [f"reward.fn={user_module}:CallBonus", "reward.options.bonus=0.5"])
    assert isinstance(build_reward(RewardSettings(cfg.reward.fn, options=cfg.reward.options)), RewardFn)
    with pytest.raises(ConfigError, match="cannot load it"):
        load_train_config(None, [f"reward.fn={user_module}:Nope"])
    with pytest.raises(ConfigError, match="does not take reward.options"):
        load_train_config(None, [f"reward.fn={user_module}:CallBonus", "reward.options.colour=1"])
    with pytest.raises(ConfigError, match="did you mean 'heuristic'"):
        load_train_config(None, ["reward.fn=heuristc"])


def test_the_old_key_still_works_with_a_warning(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("reward:\n  backend: llm_judge\n")
    with pytest.warns(FutureWarning, match="'reward.backend' is now 'reward.fn'"):
        assert load_train_config(path).reward.fn == "llm_judge"
    with pytest.warns(FutureWarning):
        assert load_train_config(None, ["reward.backend=llm_judge"]).reward.fn == "llm_judge"
