"""LLM judge against a real local OpenAI-compatible stub: scores, fallback, cache, redaction."""

import asyncio
import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mcprl.protocol.parsing import format_answer, format_tool_call
from mcprl.rewards.heuristic import RewardState, reward_heuristic
from mcprl.rewards.judge import JudgeConfig, JudgeRubric, parse_scores, reward_llm_judge, reward_llm_judge_sync

API_KEY = "sk-test-judgekey-0123456789abcdef"
TOOL_TOKEN = "tool-secret-value-9876"
SLACK_TOKEN = "xoxb-111122223333-abcdefghijkl"
VALID = {"tool_correct": 1, "args_plausible": 0.5, "progress": 0.8, "safety": 0, "total": 0.99}
GT = {
    "task_id": "finance-001",
    "complexity": "simple",
    "max_turns": 4,
    "success": {"must_call_tool": "get_last_quote"},
    "tool_sequence": [{"step": 1, "server": "polygon", "tool": "get_last_quote", "params": {"ticker": "AAPL"}}],
    "limits": {"max_servers": 1, "max_tools": 1},
    "answer": "187.42",
}
CALL = format_tool_call("get_last_quote", {"ticker": "AAPL"})
RESULT = {"ok": True, "data": {"price": 187.42, "debug": f"auth={TOOL_TOKEN} slack={SLACK_TOKEN}"}, "latency_ms": 4.0}


class Stub:
    """A chat-completions endpoint whose reply is set per test: "valid", "invalid", "slow", "error", "text"."""

    def __init__(self):
        self.mode = "valid"
        self.scores = dict(VALID)
        self.bodies: list[str] = []
        self.headers: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                stub.bodies.append(body)
                stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                if stub.mode == "error":
                    return self.reply(500, {"error": {"message": "internal error"}})
                if stub.mode == "slow":
                    time.sleep(1.5)
                content = {
                    "valid": json.dumps(stub.scores),
                    "slow": json.dumps(stub.scores),
                    "invalid": json.dumps({**stub.scores, "progress": 3, "reason": "extra"}),
                    "text": "The call looks good, I'd give it 0.8.",
                }[stub.mode]
                self.reply(200, {
                    "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "judge-stub",
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                })  # fmt: skip

            def reply(self, status, payload):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("MY_TOOL_TOKEN", TOOL_TOKEN)
    server = Stub()
    yield server
    server.close()


def config(stub, **kwargs):
    return JudgeConfig(**{"base_url": stub.url, "model": "judge-stub", "timeout": 5.0, "max_retries": 0, **kwargs})


def conversation():
    return [
        {"role": "system", "content": "You can call tools. " * 50},
        {"role": "user", "content": f"What is AAPL's last price? (my key is {API_KEY})"},
        {"role": "assistant", "content": CALL},
    ]


def judge(cfg, action=CALL, state=None, result=RESULT, gt=GT):
    return asyncio.run(
        reward_llm_judge(conversation(), action, gt, config=cfg, fallback_state=state, tool_name=None, tool_result=result)
    )


def heuristic(action=CALL, result=RESULT):
    return reward_heuristic(action, None, result, GT, RewardState())


def test_valid_scores_are_weighted_by_us(stub):
    state = RewardState()
    out = judge(config(stub), state=state)
    c = out["components"]
    assert c["judge_failed"] == 0.0 and c["judge_used"] == 1.0
    assert (c["tool_correct"], c["args_plausible"], c["progress"], c["safety"]) == (1.0, 0.5, 0.8, 0.0)
    assert c["judge_total"] == pytest.approx(0.3 * 1 + 0.2 * 0.5 + 0.5 * 0.8)  # not the reported 0.99
    assert c["judge_reported_total"] == 0.99
    assert out["total_reward"] == pytest.approx(0.5 * 0.8)
    assert state.next_step == 1 and state.positive_shaping == pytest.approx(0.4)
    request = json.loads(stub.bodies[0])
    assert request["model"] == "judge-stub" and request["temperature"] == 0 and request["max_tokens"] == 96
    assert request["response_format"]["type"] == "json_schema"
    assert request["response_format"]["json_schema"]["schema"]["required"] == [
        "tool_correct", "args_plausible", "progress", "safety", "total"
    ]  # fmt: skip


def test_request_is_truncated_and_redacted(stub):
    long_result = {"ok": True, "data": "x" * 5000 + TOOL_TOKEN}
    judge(config(stub, result_chars=100))
    judge(config(stub, result_chars=100), result=long_result)
    for body in stub.bodies:
        for secret in (API_KEY, TOOL_TOKEN, SLACK_TOKEN):
            assert secret not in body
        payload = json.loads(json.loads(body)["messages"][1]["content"])
        assert len(payload["tool_result"]) <= 101
        assert payload["intended_next_step"] == {"server": "polygon", "tool": "get_last_quote", "params": {"ticker": "AAPL"}}
        assert all(m["role"] != "system" for m in payload["recent_messages"])
    assert "[REDACTED]" in stub.bodies[0]
    assert stub.headers[0]["authorization"] == f"Bearer {API_KEY}"  # the key goes in the header only


def test_identical_requests_hit_the_disk_cache(stub, tmp_path):
    cfg = config(stub, cache_dir=tmp_path / "judge")
    first = judge(cfg)
    second = judge(cfg)
    assert len(stub.bodies) == 1
    assert (first["components"]["judge_cached"], second["components"]["judge_cached"]) == (0.0, 1.0)
    assert first["total_reward"] == second["total_reward"]
    files = list((tmp_path / "judge").glob("*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text()) == VALID
    judge(config(stub, cache_dir=tmp_path / "judge", model="other-model"))
    assert len(stub.bodies) == 2


@pytest.mark.parametrize("mode", ["invalid", "text", "error"])
def test_bad_replies_fall_back_to_the_heuristic(stub, mode, tmp_path):
    stub.mode = mode
    out = judge(config(stub, cache_dir=tmp_path))
    assert out["components"]["judge_failed"] == 1.0
    assert out["total_reward"] == heuristic()["total_reward"]
    assert len(stub.bodies) == 1
    assert not list(tmp_path.glob("*.json"))  # failures are not cached


def test_slow_reply_times_out_and_falls_back(stub):
    """The clock times the request, not openai's first import (the judge imports it lazily; 3 s cold on 2 cores)."""
    import openai  # noqa: F401

    stub.mode = "slow"
    started = time.perf_counter()
    out = judge(config(stub, timeout=0.3))
    assert time.perf_counter() - started < 1.4
    assert out["components"]["judge_failed"] == 1.0 and out["total_reward"] == heuristic()["total_reward"]


def test_unreachable_endpoint_falls_back(stub):
    stub.close()
    out = judge(config(stub, timeout=1.0))
    assert out["components"]["judge_failed"] == 1.0


def test_answers_and_malformed_steps_skip_the_judge(stub):
    state = RewardState()
    judge(config(stub), state=state)
    out = judge(config(stub), action=format_answer("187.42"), state=state, result=None)
    assert out["task_complete"] and out["components"]["solved"] == 1.0 and out["components"]["judge_used"] == 0.0
    out = judge(config(stub), action="<tool_call>{oops", result=None)
    assert out["components"]["malformed"] == -0.2 and out["components"]["judge_failed"] == 0.0
    assert len(stub.bodies) == 1


def test_scores_stay_in_range_and_share_the_episode_caps(stub):
    stub.scores = {"tool_correct": 0, "args_plausible": 0, "progress": -1, "safety": -1, "total": -7}
    state = RewardState()
    outs = [judge(config(stub), state=state, action=format_tool_call("get_last_quote", {"ticker": t})) for t in "ABC"]
    assert outs[0]["components"]["judge_total"] == -1.0
    assert [o["total_reward"] for o in outs] == pytest.approx([-0.4, 0.0, 0.0])  # 0.5 * -1, floored at -0.4
    stub.scores = dict(VALID, progress=1, args_plausible=1)
    totals = [judge(config(stub), state=state, action=format_tool_call("get_news", {"q": str(i)}))["total_reward"] for i in range(3)]
    assert totals == pytest.approx([0.5, 0.0, 0.0])
    for out in outs:
        assert -1 <= out["total_reward"] <= 1 and math.isfinite(out["total_reward"])


def test_repeated_calls_earn_no_positive_judge_shaping(stub):
    state = RewardState()
    assert judge(config(stub), state=state)["total_reward"] > 0
    assert judge(config(stub), state=state)["total_reward"] == 0.0


def test_sync_wrapper_from_worker_threads(stub):
    cfg = config(stub)

    def one(i):
        action = format_tool_call("get_last_quote", {"ticker": f"T{i}"})
        return reward_llm_judge_sync(conversation(), action, GT, JudgeRubric(notes="Finance tasks."), config=cfg, tool_result=RESULT)

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(one, range(8)))
    assert all(o["components"]["judge_failed"] == 0.0 for o in outs)
    assert len(stub.bodies) == 8
    assert "Finance tasks." in json.loads(stub.bodies[0])["messages"][0]["content"]


def test_parse_scores_accepts_fenced_json_and_rejects_schema_violations():
    assert parse_scores("```json\n" + json.dumps(VALID) + "\n```") == VALID
    for bad in [None, "", "nope", json.dumps({**VALID, "safety": 0.5}), json.dumps({k: v for k, v in VALID.items() if k != "total"})]:
        with pytest.raises(Exception, match="reply"):
            parse_scores(bad)


def test_config_is_validated():
    with pytest.raises(ValueError, match="timeout"):
        JudgeConfig(timeout=0)
    with pytest.raises(ValueError, match="max_tokens"):
        JudgeConfig(max_tokens=4)


def test_config_reads_endpoint_from_environment_where_it_is_used(monkeypatch):
    """Unset, the endpoint and model come from the environment of the process that calls the judge (a
    SkyRL worker's), read when it calls, not when the config was built."""
    cfg = JudgeConfig()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_MODEL", "judge-x")
    assert (cfg.endpoint, cfg.model_name) == ("http://127.0.0.1:9/v1", "judge-x") and cfg.base_url is None
    monkeypatch.delenv("OPENAI_MODEL")
    assert cfg.model_name == "gpt-4o-mini" and JudgeConfig(model="m").model_name == "m"


def test_judge_step_takes_the_yaml_mapping_and_env_weights(stub):
    from mcprl.protocol.parsing import parse_action
    from mcprl.rewards.heuristic import HeuristicWeights
    from mcprl.rewards.judge import judge_step

    mapping = {"base_url": stub.url, "model": "judge-stub", "max_retries": 0, "weights": {"progress": 0.0}}
    state = RewardState()
    out = judge_step(conversation(), CALL, GT, mapping, state=state, parsed=parse_action(CALL), tool_result=RESULT,
                     weights=HeuristicWeights(shaping_cap=0.1))
    assert out["components"]["judge_total"] == pytest.approx(0.3 * 1 + 0.2 * 0.5)  # progress weighted 0
    assert out["components"]["judge_shaping"] == pytest.approx(0.5 * 0.4)
    assert out["total_reward"] == pytest.approx(0.1) and state.positive_shaping == pytest.approx(0.1)  # env's cap
    with pytest.raises(ValueError, match="unknown judge config keys"):
        judge_step(conversation(), CALL, GT, {"modle": "x"}, state=RewardState())


def test_the_same_step_hits_the_cache_whatever_the_call_took(stub, tmp_path):
    """A tool result's latency_ms changes on every call; sent to the judge it made each request new, so
    the cache almost never hit (issue 49, finding 6). What the step did still changes the request."""
    cfg = config(stub, cache_dir=tmp_path / "judge")
    result = {"ok": True, "data": {"price": 101.5}, "server": "polygon", "tool": "get_last_quote"}
    judge(cfg, result={**result, "latency_ms": 12.3})
    again = judge(cfg, result={**result, "latency_ms": 48.9})
    assert len(stub.bodies) == 1 and again["components"]["judge_cached"] == 1.0
    assert "latency_ms" not in stub.bodies[0]
    judge(cfg, result={**result, "data": {"price": 99.0}, "latency_ms": 12.3})
    assert len(stub.bodies) == 2
