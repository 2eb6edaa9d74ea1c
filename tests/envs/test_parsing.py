"""Tool-call parser: each format, the first-action rule, malformed reasons and input caps."""

import time

import pytest

from mcprl.protocol.parsing import (
    FORMATS,
    MAX_INPUT_CHARS,
    TOOL_CALL_STOP,
    ParsedAction,
    canonical_json,
    format_answer,
    format_tool_call,
    parse_action,
    stop_strings,
)

ARGS = {"ticker": "AAPL", "limit": 3, "nested": {"a": [1, 2.5, None, True]}, "note": "é ünïcode ✓"}


def call(text, **kwargs):
    action = parse_action(text, **kwargs)
    assert action.kind == "tool_call", action
    return action.name, action.arguments


def malformed(text, **kwargs):
    action = parse_action(text, **kwargs)
    assert action.kind == "malformed", action
    assert action.name is None and action.arguments is None and action.error
    return action.error


@pytest.mark.parametrize("style", FORMATS)
def test_canonical_text_round_trips_in_every_style(style):
    text = format_tool_call("get_last_quote", ARGS, style=style)
    assert call(text, formats=(style,)) == ("get_last_quote", ARGS)
    assert parse_action(text, formats=(style,)).raw == text


def test_hermes_canonical_text_is_the_qwen_layout():
    assert format_tool_call("f", {"x": 1}) == '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    assert format_tool_call("f", style="json") == '{"tool": "f", "arguments": {}}'
    assert format_tool_call("f", {"x": 1}, style="xml") == '<tool><f>{"x": 1}</f></tool>'


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "get_last_quote", "arguments": {"ticker": "AAPL"}}</tool_call>',
        '<tool_call>\n  {"name": "get_last_quote",\n "arguments": {"ticker": "AAPL"}}\n\n</tool_call>',
        '<tool_call>{"name": "get_last_quote", "arguments": {"ticker": "AAPL"}}',  # stopped at the stop string
        'I will look it up.\n<tool_call>{"name": "get_last_quote", "arguments": "{\\"ticker\\": \\"AAPL\\"}"}</tool_call>',
        '<tool_call>\n```json\n{"name": "get_last_quote", "arguments": {"ticker": "AAPL"}}\n```\n</tool_call>',
        '<TOOL_CALL >{"name": " get_last_quote ", "arguments": {"ticker": "AAPL"}}</tool_call>',
        '<tool_call>{"type": "function", "function": {"name": "get_last_quote", "arguments": {"ticker": "AAPL"}}}</tool_call>',
    ],
)
def test_hermes_variants(text):
    assert call(text) == ("get_last_quote", {"ticker": "AAPL"})


def test_hermes_missing_or_empty_arguments_become_empty_object():
    assert call('<tool_call>{"name": "list_channels"}</tool_call>') == ("list_channels", {})
    assert call('<tool_call>{"name": "list_channels", "arguments": null}') == ("list_channels", {})
    assert call('<tool_call>{"name": "list_channels", "arguments": ""}') == ("list_channels", {})


def test_hermes_json_string_containing_closing_tag_is_kept_whole():
    text = '<tool_call>{"name": "post", "arguments": {"text": "</tool_call><tool_call>"}}</tool_call>'
    assert call(text) == ("post", {"text": "</tool_call><tool_call>"})


@pytest.mark.parametrize(
    "text",
    [
        'Calling: {"tool": "get_last_quote", "arguments": {"ticker": "AAPL"}}',
        '```json\n{"name": "get_last_quote", "arguments": {"ticker": "AAPL"}}\n```',
        'context {"note": "not a call"} then {"tool": "get_last_quote", "arguments": {"ticker": "AAPL"}}',
    ],
)
def test_bare_json_calls(text):
    assert call(text) == ("get_last_quote", {"ticker": "AAPL"})


def test_json_objects_that_are_not_calls_are_prose():
    assert parse_action('The record is {"name": "Ada", "age": 36}.').kind == "none"
    assert parse_action('{"calls": [{"name": "x", "arguments": {}}]}').kind == "none"


@pytest.mark.parametrize(
    "text, expected",
    [
        ('<tool><get_last_quote>{"ticker": "AAPL"}</get_last_quote></tool>', ("get_last_quote", {"ticker": "AAPL"})),
        ('<tool>\n<polygon.get_last_quote>\n{"ticker": "AAPL"}\n</polygon.get_last_quote>', ("polygon.get_last_quote", {"ticker": "AAPL"})),
        ("<tool><list_channels></list_channels></tool>", ("list_channels", {})),
        ("<tool><list_channels>", ("list_channels", {})),
    ],
)
def test_xml_variants(text, expected):
    assert call(text) == expected


def test_answer_with_and_without_closing_tag_and_custom_tag():
    assert parse_action("So the price is <answer> 187.42 </answer>").answer == "187.42"
    assert parse_action("<answer>187.42").answer == "187.42"
    action = parse_action("<final>yes</final>", answer_tag="final")
    assert (action.kind, action.answer, action.raw) == ("answer", "yes", "<final>yes</final>")
    assert parse_action("<final>yes</final>").kind == "none"


def test_first_action_in_the_text_wins():
    hermes = format_tool_call("get_last_quote", {"ticker": "AAPL"})
    answer = "<answer>187.42</answer>"
    assert parse_action(f"{hermes}\n{answer}").kind == "tool_call"
    assert parse_action(f"{answer}\n{hermes}").kind == "answer"
    two_calls = hermes + format_tool_call("get_news", {"q": "x"}, style="xml") + format_tool_call("other")
    assert call(two_calls) == ("get_last_quote", {"ticker": "AAPL"})
    assert call(format_tool_call("a", style="xml") + hermes) == ("a", {})
    # A broken first call is the action: the model hears why, instead of a later call running.
    assert parse_action('<tool_call>{"name": }</tool_call>' + hermes).kind == "malformed"


def test_thinking_is_skipped():
    hermes = format_tool_call("get_last_quote", {"ticker": "AAPL"})
    assert call(f"<think>maybe <answer>1</answer>?</think>\n{hermes}") == ("get_last_quote", {"ticker": "AAPL"})
    assert parse_action(f"<think>I could {hermes} but the budget ran out").kind == "none"


def test_formats_switch_off_parsers():
    xml = format_tool_call("f", style="xml")
    assert parse_action(xml, formats=("hermes",)).kind == "none"
    assert parse_action('{"tool": "f"}', formats=("hermes", "xml")).kind == "none"
    assert parse_action("<answer>1</answer>", formats=()).kind == "answer"
    assert call(xml, formats="xml") == ("f", {})


@pytest.mark.parametrize(
    "text, reason",
    [
        ('<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>', "invalid JSON"),
        ("<tool_call>not json</tool_call>", "invalid JSON"),
        ("<tool_call></tool_call>", "empty <tool_call>"),
        ("<tool_call>", "empty <tool_call>"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'missing "name"'),
        ('<tool_call>{"name": 7, "arguments": {}}</tool_call>', "must be a string, got number"),
        ('<tool_call>{"name": "  ", "arguments": {}}</tool_call>', "empty"),
        ('<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>', "must be a JSON object, got array"),
        ('<tool_call>{"name": "f", "arguments": "nope"}</tool_call>', "string but not a JSON object"),
        ('<tool_call>["f", {}]</tool_call>', "must be a JSON object, got array"),
        ('{"tool": "f", "arguments": {"a": ', "invalid JSON"),
        ('{"tool": ["f"], "arguments": {}}', "must be a string, got array"),
        ("<tool>just text</tool>", "expected <tool><TOOL_NAME>"),
        ("<tool><f>{oops}</f></tool>", "invalid JSON"),
        ('<tool_call>{"name": "f", "arguments": ' + "[" * 40 + "]" * 40 + "}</tool_call>", "nested"),
        ("<tool_call>" + "[" * 100_000, "nested"),
        ('<tool_call>{"name": "' + "x" * 500 + '"}</tool_call>', "longer than"),
    ],
)
def test_malformed_calls_say_why(text, reason):
    assert reason in malformed(text)


def test_prose_is_none_and_raw_keeps_the_read_text():
    action = parse_action("Let me think about which tool to use.")
    assert action == ParsedAction("none", raw="Let me think about which tool to use.")


@pytest.mark.parametrize("value", [None, b"<answer>\xff\xfe</answer>", 42, "", "\x00" * 10, "</tool_call>" * 3])
def test_odd_inputs_do_not_raise(value):
    assert parse_action(value).kind in ("none", "answer", "malformed")


def test_input_past_the_cap_is_not_read():
    padding = "x" * MAX_INPUT_CHARS
    assert parse_action(padding + "<answer>1</answer>").kind == "none"
    assert len(parse_action(padding * 3).raw) == MAX_INPUT_CHARS


@pytest.mark.parametrize(
    "text",
    [
        '{"' * 40_000,
        '{"a": [' * 20_000,
        "<tool_call>" * 10_000,
        "<tool>" * 10_000,
        '{"tool": "x", "arguments": {"s": "' + "y" * 200_000,
        ('{"k": "' + "v" * 50 + '"} ') * 2_000,
        "<answer>" * 10_000,
    ],
)
def test_adversarial_inputs_are_fast(text):
    # CPU time, not wall time: a quadratic parse takes minutes here, other work on the machine takes none.
    started = time.process_time()
    parse_action(text)
    assert time.process_time() - started < 0.5


def test_bad_config_raises_clearly():
    with pytest.raises(ValueError, match="unknown tool-call format"):
        parse_action("x", formats=("yaml",))
    with pytest.raises(ValueError, match="answer_tag"):
        parse_action("x", answer_tag="<answer>")
    with pytest.raises(ValueError, match="non-empty string"):
        format_tool_call("", {})
    with pytest.raises(ValueError, match="must be a dict"):
        format_tool_call("f", [1])
    with pytest.raises(ValueError, match="cannot be an XML tag"):
        format_tool_call("bad name", {}, style="xml")
    with pytest.raises(ValueError, match="unknown tool-call style"):
        format_tool_call("f", {}, style="yaml")


def test_stop_strings_and_answer_format():
    assert stop_strings("hermes") == [TOOL_CALL_STOP, "</answer>"]
    assert stop_strings("json", answer_tag="final") == ["</final>"]
    assert stop_strings("xml") == ["</tool>", "</answer>"]
    assert parse_action(format_answer(187.42)).answer == "187.42"


def test_canonical_json_ignores_key_order():
    assert canonical_json({"b": 1, "a": {"d": 2, "c": 3}}) == canonical_json({"a": {"c": 3, "d": 2}, "b": 1})
    assert canonical_json({"a": 1}) != canonical_json({"a": 2})
