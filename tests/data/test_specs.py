import json

import jsonschema
from rich.console import Console

from mcprl.data.sample import sample_schema
from mcprl.data.specs import convert_specs, same_result


def user(text):
    return {"role": "user", "content": text}


def call(*calls):
    return {"role": "assistant", "content": "", "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}


def tool(name, content):
    return {"role": "tool", "name": name, "content": content}


SPECS = [
    {"id": "sum", "conversation": [
        {"role": "system", "content": "ignored"}, user("What is 2 plus 3, plus 10?"),
        call(("add", {"a": 2, "b": 3})), tool("add", "5"),
        call(("add", {"a": 5, "b": 10})), tool("add", "<tool_response>\n15\n</tool_response>"),
        {"role": "assistant", "content": "The total is <answer>15</answer>"}]},
    {"id": "lookup", "data_source": "handmade", "answer": None, "conversation": [
        user("Look up key k with 2 values."),
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "fx.lookup", "arguments": '{"key": "k", "limit": 2}'}}]},
        tool("lookup", '{"key": "k", "values": [0, 1, 2]}')]},  # recorded result disagrees with the server
    {"id": "unknown", "conversation": [user("Subtract."), call(("subtract", {"a": 1}))]},
    {"id": "badargs", "conversation": [user("Add."), call(("add", {"a": "x", "b": 1}))]},
    {"id": "nouser", "conversation": [call(("add", {"a": 1, "b": 1}))]},
    {"id": "sum", "conversation": [user("Again?"), call(("add", {"a": 1, "b": 1}))]},
    {"id": "zone", "complexity": "complex", "answer": "Asia/Tokyo", "conversation": [
        user("Which zone is Tokyo in?"), call(("get_current_time", {"timezone": "Asia/Tokyo"}))]},
]


def write_specs(path):
    lines = [json.dumps(s) for s in SPECS]
    lines.insert(3, '{"id": "broken", "conversation": [')
    path.write_text("\n".join(lines) + "\n")
    return path


def convert(live, path, verify):
    return live.run(convert_specs(live.tm, path, verify=verify, console=Console(record=True)))


def test_specs_become_samples_and_bad_specs_are_dropped(live, tmp_path):
    out = convert(live, write_specs(tmp_path / "specs.jsonl"), verify=False)
    by_id = {s.task_id: s for s in out.samples}
    assert list(by_id) == ["sum", "lookup", "zone"]
    for s in out.samples:
        jsonschema.validate(s.to_dict(), sample_schema())

    total = by_id["sum"].ground_truth
    assert by_id["sum"].prompt[1] == user("What is 2 plus 3, plus 10?")
    assert total["answer"] == "15" and total["complexity"] == "medium" and total["success"]["answer_required"]
    assert [s["params"] for s in total["tool_sequence"]] == [{"a": 2, "b": 3}, {"a": 5, "b": 10}]
    assert by_id["sum"].data_source == "specs/fx" and "get_current_time" not in by_id["sum"].prompt[0]["content"]

    look = by_id["lookup"]
    assert look.data_source == "handmade" and look.ground_truth["answer"] is None
    assert look.ground_truth["tool_sequence"] == [{"step": 1, "server": "fx", "tool": "lookup",
                                                   "params": {"key": "k", "limit": 2}}]
    assert look.ground_truth["complexity"] == "simple" and not look.ground_truth["success"]["answer_required"]
    zone = by_id["zone"].ground_truth
    assert zone["complexity"] == "complex" and zone["allowed_tools"] == ["get_current_time", "convert_time"]

    reasons = {d.index: d.reason for d in out.dropped}
    assert "unknown tool 'subtract'" in reasons[3]  # row numbers are line numbers
    assert "invalid JSON" in reasons[4]
    assert "call 1 add: invalid arguments" in reasons[5]
    assert "no user message" in reasons[6]
    assert "duplicate id 'sum'" in reasons[7]
    # Every call of `sum` and `lookup` has a recorded result, so they come with expert trajectories.
    assert [e["task_id"] for e in out.experts] == ["sum", "lookup"]
    assert out.experts[0]["messages"][-1]["content"] == "<answer>15</answer>"


def test_verify_drops_specs_whose_recorded_results_differ(live, tmp_path):
    out = convert(live, write_specs(tmp_path / "specs.jsonl"), verify=True)
    assert [s.task_id for s in out.samples] == ["sum", "zone"]
    verify = [d for d in out.dropped if d.stage == "verify"]
    assert len(verify) == 1 and verify[0].reason.startswith("call 1 lookup: the recorded result differs")
    assert out.samples[0].extra_info["verified"] is True
    assert [e["task_id"] for e in out.experts] == ["sum", "zone"]


def test_same_result_compares_json_and_text():
    assert same_result('{"a": [1, 2]}', {"ok": True, "data": {"a": [1, 2]}})
    assert same_result("<tool_response>\nhello  world\n</tool_response>", {"ok": True, "data": "hello world"})
    assert not same_result("5", {"ok": True, "data": 6})
    assert not same_result("5", {"ok": False, "error": "x"})
