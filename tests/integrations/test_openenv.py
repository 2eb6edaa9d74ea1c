"""OpenEnv both ways, without the openenv package (its own venv runs the conformance tests): `mcprl openenv
serve` on real tasks and servers, `openenv_env` through SkyRL's generator against it and against a small
text game that speaks the same wire protocol, and the TRL shim."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
import skyrl_gym
from typer.testing import CliRunner

import mcprl.envs  # noqa: F401 - registers openenv_env
from mcprl.cli.main import app as cli
from mcprl.data.rules import generate
from mcprl.data.sample import as_openenv_row, read_samples, write_samples
from mcprl.data.validate import validate_file
from mcprl.envs.config import EnvConfig
from mcprl.integrations.openenv.app import build_app, running
from mcprl.integrations.openenv.episode import TaskPool
from mcprl.protocol.parsing import format_answer, format_tool_call
from mcprl.tools.openenv import OpenEnvError, OpenEnvSession
from mcprl.training.config import env_config, load_train_config
from mcprl.training.rollout import Rollouts
from tests.conftest import free_port
from tests.support.openenv_text_game import text_game
from tests.support.scripted import ScriptedClient, expert_policy


@pytest.fixture(scope="module")
def tasks():
    return generate(6, seed=21, progress=False)


@pytest.fixture(scope="module")
def served(tasks):
    with running(build_app(TaskPool(tasks.samples), EnvConfig(), max_sessions=6), port=free_port()) as url:
        yield url


def expert_calls(sample):
    return [(s["tool"], s["params"]) for s in sample.ground_truth["tool_sequence"]]


def direct_reward(sample, actions):
    env = skyrl_gym.make("mcp_tool_env", env_config={}, extras={"reward_spec": sample.reward_spec,
                                                                "extra_info": sample.extra_info})
    env.init(sample.prompt)
    total = 0.0
    for text in actions:
        out = env.step(text)
        total += out["reward"]
        if out["done"]:
            break
    return total, env.success


def test_served_episodes_score_exactly_as_the_env_does(served, tasks):
    """Every task solved over the wire, call by call, with the reward mcp_tool_env gives the same turns."""
    for sample in tasks.samples:
        calls, answer = expert_calls(sample), str(sample.ground_truth["answer"])
        with OpenEnvSession(served) as session:
            reset = session.reset(task_id=sample.task_id)
            meta = reset.metadata
            assert meta["task_id"] == sample.task_id and meta["max_turns"] >= 1
            assert meta["question"] == sample.prompt[-1]["content"] and meta["prompt"][-1] == sample.prompt[-1]
            assert "answer" in {t["name"] for t in meta["tools"]}
            rewards = []
            for tool, params in calls:
                reply = session.call_tool(tool, params)
                assert reply.observation["error"] is None, reply.observation
                assert reply.observation["result"]["content"][0]["type"] == "text"
                rewards.append(reply.reward)
                if reply.done:
                    break
            if not reply.done:
                reply = session.call_tool("answer", {"answer": answer})
                rewards.append(reply.reward)
            assert reply.done
            state = session.state()
        expected, solved = direct_reward(sample, [format_tool_call(t, p) for t, p in calls] + [format_answer(answer)])
        assert solved and state["solved"] and state["task_id"] == sample.task_id
        assert sum(rewards) == pytest.approx(expected) == pytest.approx(state["reward_so_far"])
        assert state["step_count"] == len(rewards)


def test_a_wrong_answer_fails_and_bad_actions_get_typed_errors(served, tasks):
    sample = tasks.samples[2]  # employees of DIS: one lookup, then the answer
    with OpenEnvSession(served) as session:
        with pytest.raises(OpenEnvError, match="reset first"):
            session.call_tool("get_ticker_details", {"ticker": "DIS"})
        session.reset(task_id=sample.task_id)
        assert session.call_tool("get_tikcer_details", {"ticker": "DIS"}).observation["error"]["error_type"] == "tool_not_found"
        assert session.call_tool("get_ticker_details", {"tick": "DIS"}).observation["error"]["error_type"] == "invalid_args"
        assert session.step({"type": "call_tool", "tool_name": "get_ticker_details",
                             "arguments": "DIS"}).observation["error"]["error_type"] == "invalid_args"
        with pytest.raises(OpenEnvError, match="unknown action type") as err:
            session.step({"type": "dance"})
        assert err.value.code == "EXECUTION_ERROR"
        with pytest.raises(OpenEnvError, match="unknown task_id 'nope'"):
            session.reset(task_id="nope")
        session.reset(task_id=sample.task_id)
        session.call_tool("get_ticker_details", {"ticker": "DIS"})
        reply = session.step({"type": "message", "content": "<answer>12</answer>"})  # a raw turn, mcprl's parser
        assert reply.done and reply.reward < 0 and reply.observation["content"] is None
        assert not session.state()["solved"]
        with pytest.raises(OpenEnvError, match="episode is over"):
            session.call_tool("get_ticker_details", {"ticker": "DIS"})


def test_sessions_are_capped_and_keep_their_slack_posts_apart(tasks):
    sample = tasks.samples[0]  # posts to #trading-desk
    with running(build_app(TaskPool(tasks.samples), EnvConfig(), max_sessions=4), port=free_port()) as url:
        sessions = [OpenEnvSession(url) for _ in range(4)]
        with pytest.raises(OpenEnvError) as err:
            OpenEnvSession(url).reset(task_id=sample.task_id)
        assert err.value.code == "CAPACITY_REACHED"
        seen: dict[int, list[str]] = {}

        def episode(i: int) -> None:
            sessions[i].reset(task_id=sample.task_id)
            sessions[i].call_tool("post_message", {"channel": "trading-desk", "text": f"note {i}"})
            history = sessions[i].call_tool("get_channel_history", {"channel": "trading-desk"})
            seen[i] = [m["text"] for m in history.observation["result"]["data"]["messages"] if m["text"].startswith("note")]

        threads = [threading.Thread(target=episode, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert seen == {i: [f"note {i}"] for i in range(4)}
        sessions[0].close()
        for _ in range(50):  # the server frees the slot as the socket closes
            try:
                with OpenEnvSession(url) as again:
                    again.reset(task_id=sample.task_id)
                break
            except OpenEnvError:
                threading.Event().wait(0.1)
        else:
            raise AssertionError("a closed session's slot was not freed")
        for s in sessions[1:]:
            s.close()


def test_no_secret_reaches_a_reply(served, tasks, monkeypatch):
    secret = "sk-live-0123456789abcdefABCDEF"
    monkeypatch.setenv("ACME_API_KEY", secret)
    with OpenEnvSession(served) as session:
        session.reset(task_id=tasks.samples[2].task_id)
        reply = session.call_tool(f"lookup_{secret}", {"q": secret})
        assert secret not in json.dumps(reply.observation) and "[REDACTED]" in json.dumps(reply.observation)
        with pytest.raises(OpenEnvError) as err:
            session.reset(task_id=secret)
        assert secret not in str(err.value)
    body = httpx.post(f"{served}/mcp", json={"jsonrpc": "2.0", "method": secret, "id": 1}).text
    assert secret not in body


def test_the_endpoints_openenv_validate_reads_and_http_mcp_sessions(served, tasks):
    assert httpx.get(f"{served}/health").json()["status"] == "healthy"
    meta = httpx.get(f"{served}/metadata").json()
    assert isinstance(meta["name"], str) and isinstance(meta["description"], str)
    schema = httpx.get(f"{served}/schema").json()
    assert all(isinstance(schema[k], dict) for k in ("action", "observation", "state"))
    spec = httpx.get(f"{served}/openapi.json").json()
    assert spec["info"]["version"].startswith("1.") and not {"/reset", "/step", "/state"} & set(spec["paths"])
    assert httpx.post(f"{served}/mcp", json={}).json()["jsonrpc"] == "2.0"

    def rpc(method, **params):
        return httpx.post(f"{served}/mcp", json={"jsonrpc": "2.0", "method": method, "params": params, "id": 7}).json()

    assert "search" in {t["name"] for t in rpc("tools/list")["result"]["tools"]}
    sid = rpc("openenv/session/create")["result"]["session_id"]
    sample = tasks.samples[2]
    with OpenEnvSession(f"{served.replace('http', 'ws')}/ws?session_id={sid}") as attached:  # MCPToolClient's way
        attached.reset(task_id=sample.task_id)
        call = rpc("tools/call", name="get_ticker_details", arguments={"ticker": "DIS"}, session_id=sid)["result"]
        assert call["error"] is None and call["reward"] > 0 and not call["done"]
        assert attached.state()["step_count"] == 1
    assert rpc("openenv/session/close", session_id=sid)["result"]["closed"]
    assert "error" in rpc("tools/call", name="get_ticker_details", arguments={"ticker": "DIS"}, session_id=sid)


def test_openenv_env_through_skyrls_generator_matches_the_direct_env(served, tasks, tokenizer):
    """The same scripted turns over `openenv_env` (mcprl's tasks served over the wire) and over `mcp_tool_env`
    directly: the same rewards per episode, all solved."""
    cfg = load_train_config("configs/quickstart.yaml")
    policy = expert_policy(tasks.experts)

    def run(rows, openenv_url=None):
        rollouts = Rollouts(ScriptedClient(tokenizer, policy), tokenizer, env_config=env_config(cfg), max_turns=6,
                            max_input_length=4096, max_new_tokens=128,
                            openenv_config={"url": openenv_url, "max_turns": 6})
        return rollouts.run(rows, 1, rollouts.sampling(0.0)).trajectories

    direct = run(tasks.samples)
    rows = [as_openenv_row(s) for s in tasks.samples]
    del rows[0].reward_spec["ground_truth"]["complexity"]  # a hand-written row need not say
    wired = run(rows, served)
    assert wired[0]["complexity"] == "unknown"
    assert [t["success"] for t in wired] == [True] * len(tasks.samples) == [t["success"] for t in direct]
    assert [t["reward"] for t in wired] == pytest.approx([t["reward"] for t in direct])
    assert [[s["tool"] for s in t["turns"]] for t in wired] == [[s["tool"] for s in t["turns"]] for t in direct]
    assert all(t["stop_reason"] == "answered" for t in wired)


def test_openenv_env_plays_a_text_game_through_the_schema_template(tokenizer):
    """An OpenEnv environment without MCP tools: the model's turn goes into the action field /schema names."""
    with running(text_game(), port=free_port()) as url:
        env = skyrl_gym.make("openenv_env", env_config={"url": url},
                             extras={"extra_info": {"reset_kwargs": {"word": "banana"}}})
        prompt, _ = env.init([])
        assert prompt == [{"role": "user", "content": "Guess the word; it has 6 letters."}]
        first = env.step("apple")
        assert not first["done"] and first["reward"] == 0.0 and "wrong" in first["observations"][0]["content"]
        second = env.step("<answer>banana</answer>")
        assert second["done"] and second["reward"] == 1.0
        metrics = env.get_metrics()
        env.close()
    assert metrics["success"] and metrics["stop_reason"] == "answered" and metrics["turns"] == 2


def test_openenv_env_never_raises_on_a_dead_server():
    env = skyrl_gym.make("openenv_env", env_config={"url": f"http://127.0.0.1:{free_port()}", "connect_timeout_s": 1},
                         extras={})
    prompt, info = env.init([{"role": "user", "content": "hi"}])
    assert prompt == [{"role": "user", "content": "hi"}] and "cannot open" in info["openenv_error"]
    out = env.step("<tool_call>{\"name\": \"x\", \"arguments\": {}}</tool_call>")
    assert out["done"] and out["reward"] == 0.0 and env.get_metrics()["stop_reason"] == "error"


def test_the_trl_shim_offers_the_tools_as_methods_and_scores_the_episode(served, tasks):
    import inspect

    from transformers.utils import get_json_schema

    from mcprl.integrations.trl import environment_factory, episode_reward

    env = environment_factory(served)()
    tools = {n: m for n, m in inspect.getmembers(env, predicate=inspect.ismethod) if not n.startswith("_") and n != "reset"}
    assert {"get_ticker_details", "post_message", "run_python", "answer"} <= set(tools)
    schemas = {n: get_json_schema(m)["function"] for n, m in tools.items()}  # what TRL builds, or it raises
    assert schemas["extract"]["parameters"]["properties"]["urls"]["type"] == "array"
    assert schemas["get_daily_bars"]["parameters"]["required"] == ["ticker", "start_date", "end_date"]
    sample = tasks.samples[2]
    assert env.reset(reset_kwargs={"task_id": sample.task_id}) == sample.prompt[-1]["content"]
    assert "220000" in env.get_ticker_details(ticker="DIS")
    with pytest.raises(TypeError):  # the signature is the schema's
        env.get_ticker_details(tick="DIS")
    with pytest.raises(RuntimeError, match="invalid_args"):  # TRL shows the model {"error": ...}
        env._call("get_ticker_details", {"tick": "DIS"})
    env.answer(answer="220000")
    assert env.done and episode_reward([env]) == [pytest.approx(env.reward)] and env.reward > 1.0


def test_rows_and_serve_in_one_line_each(tmp_path, tasks):
    runner = CliRunner()
    result = runner.invoke(cli, ["openenv", "serve", "--data", str(tmp_path / "none.jsonl")])
    assert result.exit_code == 2 and "no such file" in result.output and "Traceback" not in result.output
    source, rows = tmp_path / "tasks.jsonl", tmp_path / "rows.jsonl"
    write_samples(tasks.samples, source)
    result = runner.invoke(cli, ["openenv", "rows", "--data", str(source), "--out", str(rows), "--url", "http://h:1"])
    assert result.exit_code == 0, result.output
    converted = read_samples(rows)
    assert [r.task_id for r in converted] == [t.task_id for t in tasks.samples]
    assert {r.env_class for r in converted} == {"openenv_env"} and converted[0].extra_info["openenv_url"] == "http://h:1"
    assert converted[0].extra_info["reset_kwargs"] == {"task_id": tasks.samples[0].task_id}
    assert validate_file(rows, max_tokens=None).ok  # the schema's openenv_env branch
    broken = tmp_path / "broken.jsonl"
    broken.write_text(rows.read_text().replace('"task_id": "rules', '"id": "rules'))
    assert "task_id: required field is missing" in str(validate_file(broken, max_tokens=None).problems[0])
    result = runner.invoke(cli, ["openenv", "serve", "--data", str(rows)])
    assert result.exit_code == 2 and "only mcp_tool_env tasks can be served" in result.output
    result = runner.invoke(cli, ["openenv", "serve", "--data", str(rows), "--max-sessions", "0"])
    assert result.exit_code == 2 and "--max-sessions" in result.output
