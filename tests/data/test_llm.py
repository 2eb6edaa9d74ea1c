"""The LLM generator against a real local OpenAI-compatible server and real MCP servers."""

import json
import re
import time

import jsonschema
import pytest
from rich.console import Console

from mcprl.data.llm import LLMConfig, LLMError, generate_llm
from mcprl.data.sample import sample_schema

from .openai_stub import Reply, StubOpenAI

SECRET = "sk-test-0123456789abcdefghijklmnop"


def plan(user_task, steps, answer):
    return json.dumps({"user_task": user_task, "answer": answer,
                       "steps": [{"server": s, "tool": t, "arguments": json.dumps(a)} for s, t, a in steps]})


VALID = plan("Add 2 and 3, then add 10 to the result. What is the total?",
             [("fx", "add", {"a": 2, "b": 3}), ("fx", "add", {"a": "{{step1.data}}", "b": 10})], "{{step2.data}}")


def request_index(body):
    messages = body.get("messages") or body.get("input")
    return int(re.search(r"Task request #(\d+)", messages[1]["content"]).group(1))


def feedback(body):
    messages = body.get("messages") or body.get("input")
    return messages[-1]["content"] if len(messages) > 2 else None


def output_format(body):
    return body["response_format"]["type"] if "response_format" in body else body["text"]["format"]["type"]


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def run(live, stub, tmp_path, **knobs):
    cfg = LLMConfig(**{"model": "stub-model", "base_url": stub.url, "n_samples": 1, "domains": ["fx"],
                       "complexities": ["medium"], "timeout_s": 2.0, "retries": 1, "backoff_s": 0.0,
                       "cache_dir": tmp_path / "cache", "concurrency": 2, **knobs})
    console = Console(record=True, width=200)

    return live.run(generate_llm(live.tm, cfg, console=console)), console.export_text()


@pytest.mark.parametrize("backend", ["chat", "responses"])
def test_valid_plan_is_executed_into_ground_truth(live, tmp_path, backend):
    with StubOpenAI(lambda path, body: Reply(VALID)) as stub:
        out, log = run(live, stub, tmp_path, backend=backend)
    (sample,) = out.samples
    gt = sample.ground_truth
    jsonschema.validate(sample.to_dict(), sample_schema())
    assert gt["tool_sequence"] == [{"step": 1, "server": "fx", "tool": "add", "params": {"a": 2, "b": 3}},
                                   {"step": 2, "server": "fx", "tool": "add", "params": {"a": 5, "b": 10}}]
    assert gt["answer"] == 15 and gt["complexity"] == "medium" and gt["task_id"] == "llm-0-00000"
    assert sample.prompt[1] == {"role": "user", "content": "Add 2 and 3, then add 10 to the result. What is the total?"}
    assert "- add(a: integer, b: integer)" in sample.prompt[0]["content"]
    assert sample.data_source == "llm/fx" and sample.extra_info["model"] == "stub-model"
    assert out.experts[0]["messages"][-1]["content"] == "<answer>15</answer>"
    path, body = stub.requests[0]
    if backend == "chat":
        assert path == "/v1/chat/completions" and body["response_format"]["json_schema"]["strict"]
    else:
        assert path == "/v1/responses" and body["text"]["format"]["strict"]
    assert output_format(body) == "json_schema"
    assert "add(a: integer, b: integer)" in (body.get("messages") or body.get("input"))[1]["content"]  # live inventory
    assert stub.auth_headers[0] == f"Bearer {SECRET}"
    dumped = json.dumps([sample.to_dict(), out.experts]) + log
    assert SECRET not in dumped and "kept 1 of 1" in log


def test_invalid_reply_is_fed_back_then_dropped_after_attempts(live, tmp_path):
    def script(path, body):
        if request_index(body) == 0 and feedback(body):  # request 0 recovers once told what was wrong
            return Reply(VALID)
        return Reply(json.dumps({"user_task": "Add numbers", "steps": "add"}))

    with StubOpenAI(script) as stub:
        out, log = run(live, stub, tmp_path, n_samples=2, attempts=3)
    assert [s.task_id for s in out.samples] == ["llm-0-00000"]
    (dropped,) = out.dropped
    assert dropped.index == 1 and dropped.stage == "reply" and "no valid plan in 3 attempts" in dropped.reason
    retries = [feedback(b) for _, b in stub.requests if request_index(b) == 1 and feedback(b)]
    assert len(retries) == 2 and "does not match the schema" in retries[0] and "steps" in retries[0]
    assert "dropped #1 (reply)" in log


def test_slow_endpoint_times_out_is_retried_then_dropped(live, tmp_path):
    with StubOpenAI(lambda path, body: Reply(VALID, delay_s=1.5)) as stub:
        t0 = time.monotonic()
        out, _ = run(live, stub, tmp_path, timeout_s=0.2, retries=2)
        elapsed = time.monotonic() - t0
    assert not out.samples and out.dropped[0].stage == "llm" and "APITimeoutError" in out.dropped[0].reason
    assert len(stub.requests) == 3 and elapsed < 8


def test_rate_limit_and_server_errors_are_retried(live, tmp_path):
    statuses = iter([429, 503])

    def script(path, body):
        status = next(statuses, 200)
        return Reply(VALID) if status == 200 else Reply(status=status, error="busy")

    with StubOpenAI(script) as stub:
        out, _ = run(live, stub, tmp_path, retries=2)
    assert len(out.samples) == 1 and len(stub.requests) == 3


@pytest.mark.parametrize("backend", ["chat", "responses"])
def test_json_schema_unsupported_falls_back_to_json_mode(live, tmp_path, backend):
    def script(path, body):
        if output_format(body) == "json_schema":
            return Reply(status=400, error="response_format json_schema is not supported by this model")
        return Reply(f"```json\n{VALID}\n```")

    with StubOpenAI(script) as stub:
        out, log = run(live, stub, tmp_path, backend=backend, n_samples=2, concurrency=1)
    assert [s.ground_truth["answer"] for s in out.samples] == [15]  # the same task twice: one is a duplicate
    assert out.dropped[0].stage == "duplicate"
    formats = [output_format(b) for _, b in stub.requests]
    assert formats == ["json_schema", "json_object", "json_object"]  # the fallback sticks for later requests
    path, body = stub.requests[1]
    assert path == ("/v1/responses" if backend == "responses" else "/v1/chat/completions")
    system = (body.get("messages") or body.get("input"))[0]["content"]
    assert "must match this JSON schema" in system and '"user_task"' in system
    assert "using JSON mode" in log


def test_plans_that_fail_execution_are_dropped_with_reasons(live, tmp_path):
    failing = {
        0: plan("Please fail on purpose.", [("fx", "fail", {"reason": "x"})], None),
        1: plan("Subtract 3 from 5.", [("fx", "subtract", {"a": 5, "b": 3})], "{{step1.data}}"),
        2: plan("Look up key k.", [("fx", "lookup", {"key": "k"})], "{{step1.data.missing}}"),
        3: plan("Add two and three.", [("fx", "add", {"a": "two", "b": 3})], "{{step1.data}}"),
    }
    tokyo = plan("What time zone is Tokyo in?", [("time", "get_current_time", {"timezone": "Asia/Tokyo"})],
                 "{{step1.data.timezone}}")

    def script(path, body):
        return Reply(tokyo if "Servers: time" in body["messages"][1]["content"] else failing[request_index(body)])

    with StubOpenAI(script) as stub:
        out, log = run(live, stub, tmp_path, n_samples=4, complexities=["simple"])
        kept, _ = run(live, stub, tmp_path, domains=["time"], complexities=["simple"])
    reasons = {d.index: (d.stage, d.reason) for d in out.dropped}
    assert not out.samples and len(reasons) == 4
    assert reasons[0][0] == "execution" and "fail: tool_error" in reasons[0][1]
    assert reasons[1][0] == "execution" and "unknown tool 'fx.subtract'" in reasons[1][1]
    assert reasons[2][0] == "answer" and "no key 'missing'" in reasons[2][1]
    assert reasons[3][0] == "execution" and "invalid_arguments" in reasons[3][1]
    assert "dropped #1 (execution)" in log
    (sample,) = kept.samples
    assert sample.ground_truth["answer"] == "Asia/Tokyo" and sample.data_source == "llm/time"
    assert sample.ground_truth["allowed_tools"] == ["get_current_time", "convert_time"]
    assert "add(" not in sample.prompt[0]["content"]  # only the tools of the servers involved


def test_cache_makes_a_rerun_free_and_identical(live, tmp_path):
    with StubOpenAI(lambda path, body: Reply(VALID)) as stub:
        first, _ = run(live, stub, tmp_path)
        asked = len(stub.requests)
        second, _ = run(live, stub, tmp_path)
    assert asked == 1 and len(stub.requests) == 1
    assert [s.to_dict() for s in first.samples] == [s.to_dict() for s in second.samples]
    assert SECRET not in "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json"))


def test_rejected_key_aborts_the_run(live, tmp_path):
    with StubOpenAI(lambda path, body: Reply(status=401, error="invalid api key")) as stub:
        with pytest.raises(LLMError, match="check OPENAI_API_KEY"):
            run(live, stub, tmp_path, n_samples=3)
    assert len(stub.requests) <= 3


def test_config_rejects_impossible_constraints():
    with pytest.raises(LLMError, match="complexity 'complex' needs 3 calls"):
        LLMConfig(max_tools=2, complexities=["complex"])
    with pytest.raises(LLMError, match="unknown complexities"):
        LLMConfig(complexities=["hard"])


def fake_tool(server, tool):
    from mcprl.tools.manager import ToolInfo

    return ToolInfo(tool, server, tool, f"{tool} things.", {"type": "object", "properties": {}}, validator=None)


def test_requests_are_seeded_and_spread_over_complexities_and_servers():
    from mcprl.data.llm import plan_requests

    tools = [fake_tool(s, f"{s}_{i}") for s in ("a", "b", "c") for i in range(3)]
    cfg = LLMConfig(n_samples=30, seed=5, cache_dir=None)
    first, again = plan_requests(tools, cfg), plan_requests(tools, cfg)
    assert first == again and first != plan_requests(tools, LLMConfig(n_samples=30, seed=6, cache_dir=None))
    assert [r.complexity for r in first[:6]] == ["simple", "medium", "complex"] * 2
    assert all(len(r.servers) == 1 for r in first if r.complexity == "simple")
    assert all(len(r.servers) >= 2 for r in first if r.complexity == "complex")
    assert all(r.focus.split(".")[0] in r.servers for r in first)
    assert len({r.focus for r in first}) > 5
    with pytest.raises(LLMError, match="unknown domains"):
        plan_requests(tools, LLMConfig(domains=["zz"], cache_dir=None))
    with pytest.raises(LLMError, match="complex tasks need 4 calls"):
        plan_requests(tools[:6], LLMConfig(max_tools=3, cache_dir=None))


@pytest.mark.parametrize(("reply", "fragment"), [
    ("not json", "not valid JSON"),
    (json.dumps({"refusal": "no"}), "the model refused"),
    (plan("t", [("a", "x", {})], "{{step1.data}}").replace('"{}"', '"[1]"'), "must encode a JSON object"),
    (plan("t", [("a", "x", {})], "{{step1.data}}").replace('"{}"', '"{oops"'), "not a JSON object string"),
    (plan("t", [("zz", "x", {})], "{{step1.data}}"), "uses server 'zz'"),
    (plan("t", [("a", "x", {})] * 3, "{{step3.data}}"), "3 calls on 1 server(s) is not a simple task"),
    (plan("t", [("a", "x", {})], "42"), "answer must take its value from a result"),
])
def test_parse_plan_explains_what_to_fix(reply, fragment):
    from mcprl.data.llm import PlanReplyError, TaskRequest, parse_plan

    req = TaskRequest(0, "simple", ("a", "b"), "a.x")
    with pytest.raises(PlanReplyError, match=re.escape(fragment)):
        parse_plan(reply, req, LLMConfig(cache_dir=None))
    fenced = parse_plan(f"```json\n{plan(' Hi ', [('b', 'x', {'k': 1})], None)}\n```", req, LLMConfig(cache_dir=None))
    assert fenced.user_task == "Hi" and fenced.steps == [{"server": "b", "tool": "x", "params": {"k": 1}}]


def test_a_wrong_result_path_is_repaired_with_the_real_results(live, tmp_path):
    wrong = plan("What is the last value stored under key k?", [("fx", "lookup", {"key": "k"})], "{{step1.data.last}}")
    right = plan("What is the last value stored under key k?", [("fx", "lookup", {"key": "k"})],
                 "{{step1.data.values[-1]}}")

    def script(path, body):
        told = feedback(body)
        return Reply(right if told and 'step1 (fx.lookup) returned data: {"key":"k","values":[0,1,2]}' in told
                     else wrong)

    with StubOpenAI(script) as stub:
        out, _ = run(live, stub, tmp_path, complexities=["simple"])
    assert [s.ground_truth["answer"] for s in out.samples] == [2] and len(stub.requests) == 2
    assert "has no key 'last'" in feedback(stub.requests[1][1])
