import pytest

from mcprl.data.execute import (
    PlaceholderError,
    build_sample,
    execute_plan,
    expert_trajectory,
    infer_complexity,
    resolve_placeholders,
)

RESULTS = [
    {"ok": True, "data": {"price": 187.42, "bars": [{"c": 1.5}, {"c": 2.5}], "name": "Apple"}},
    {"ok": True, "data": 15},
]


def test_whole_placeholder_keeps_json_type():
    assert resolve_placeholders("{{step1.data.price}}", RESULTS) == 187.42
    assert resolve_placeholders("{{ step2 }}", RESULTS) == 15
    assert resolve_placeholders("{{step1.bars[-1].c}}", RESULTS) == 2.5  # `data.` may be left out
    assert resolve_placeholders({"x": ["{{step1.data.bars.0}}"]}, RESULTS) == {"x": [{"c": 1.5}]}


def test_embedded_placeholder_is_formatted_into_text():
    text = resolve_placeholders("{{step1.data.name}} costs {{step1.data.price}}; bars {{step1.data.bars[0]}}", RESULTS)
    assert text == 'Apple costs 187.42; bars {"c":1.5}'


@pytest.mark.parametrize(("template", "fragment"), [
    ("{{step3.data}}", "refers to step 3"),
    ("{{step1.data.volume}}", "has no key 'volume'"),
    ("{{step1.data.bars[5]}}", "list of 2"),
    ("{{step2.data.x}}", "is int"),
    ("see {{step1.data['price']}}", "malformed placeholder"),
])
def test_unresolvable_placeholders_raise_with_the_reason(template, fragment):
    with pytest.raises(PlaceholderError, match=fragment.replace("[", r"\[")):
        resolve_placeholders(template, RESULTS)


def test_infer_complexity_by_calls_and_servers():
    assert [infer_complexity(n) for n in (1, 2, 3, 4)] == ["simple", "medium", "medium", "complex"]
    assert infer_complexity(3, 3) == "complex" and infer_complexity(3, 2) == "medium"


def test_execute_plan_chains_results_and_builds_ground_truth(live):
    tm = live.tm

    async def run():
        good = await execute_plan(tm, [
            {"server": "fx", "tool": "add", "params": {"a": 2, "b": 3}},
            {"tool": "add", "params": {"a": "{{step1.data}}", "b": 10}},
            {"server": "fx", "tool": "lookup", "params": {"key": "sum={{step2}}", "limit": "{{step1}}"}},
        ])
        failing = await execute_plan(tm, [{"tool": "add", "params": {"a": 1, "b": 1}},
                                          {"tool": "fail", "params": {"reason": "nope"}},
                                          {"tool": "add", "params": {"a": 1, "b": 1}}])
        unknown = await execute_plan(tm, [{"server": "fx", "tool": "subtract", "params": {}}])
        bad_args = await execute_plan(tm, [{"tool": "add", "params": {"a": "two", "b": 1}}])
        forward = await execute_plan(tm, [{"tool": "add", "params": {"a": "{{step2.data}}", "b": 1}}])
        return good, failing, unknown, bad_args, forward

    good, failing, unknown, bad_args, forward = live.run(run())
    tools = [t for t in tm.tools() if t.server == "fx"]
    assert good.ok and good.resolve("{{step3.data.values[-1]}}") == 4
    assert good.tool_sequence() == [
        {"step": 1, "server": "fx", "tool": "add", "params": {"a": 2, "b": 3}},
        {"step": 2, "server": "fx", "tool": "add", "params": {"a": 5, "b": 10}},
        {"step": 3, "server": "fx", "tool": "lookup", "params": {"key": "sum=15", "limit": 5}},
    ]
    assert not failing.ok and failing.failed_step == 2 and len(failing.steps) == 2
    assert failing.reason.startswith("step 2 fail: tool_error")
    assert unknown.failed_step == 1 and "unknown tool 'fx.subtract'" in unknown.reason
    assert "invalid_arguments" in bad_args.reason
    assert "refers to step 2" in forward.reason

    sample = build_sample("t1", "Add things up.", good, answer=15, allowed=tools, data_source="test",
                          max_turns=6)
    gt = sample.ground_truth
    assert gt["complexity"] == "medium" and gt["max_turns"] == 5 and gt["limits"] == {"max_servers": 1, "max_tools": 4}
    assert gt["success"] == {"must_call_tool": "add", "answer_required": True, "must_call_tools": ["add", "lookup"]}
    assert gt["allowed_tools"] == [t.name for t in tools]
    assert "- add(a: integer, b: integer)" in sample.prompt[0]["content"]
    expert = expert_trajectory(sample, good)
    assert [m["role"] for m in expert["messages"]] == ["system", "user"] + ["assistant", "user"] * 3 + ["assistant"]
    assert '"arguments": {"a": 5, "b": 10}' in expert["messages"][4]["content"]
    assert "15" in expert["messages"][5]["content"] and expert["messages"][-1]["content"] == "<answer>15</answer>"
