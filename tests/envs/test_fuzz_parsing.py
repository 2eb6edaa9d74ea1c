"""Fuzz: random and adversarial turns never crash the parser or the heuristic reward."""

import json
import math
import random

import pytest

from mcprl.protocol.parsing import FORMATS, format_tool_call, parse_action
from mcprl.rewards.heuristic import HeuristicWeights, RewardState, reward_heuristic

SEED = 20240611
KINDS = {"tool_call", "answer", "malformed", "none"}
FRAGMENTS = [
    "<tool_call>", "</tool_call>", "<tool>", "</tool>", "<answer>", "</answer>", "<get_last_quote>",
    "</get_last_quote>", "{", "}", "[", "]", '"name"', '"tool"', '"arguments"', '"function"', ":", ",",
    '"', "\\", "\\u0000", "```json", "```", "\n", "\x00", "null", "true", "1e999", "-0", "NaN", "Infinity",
    '"get_last_quote"', '{"ticker": "AAPL"}', "<think>", "</think>", "AAPL", "187.42", "é", "\u202e", "\ud800", "🙂", " ",
]  # fmt: skip
TOOL_RESULTS = [
    None,
    {"ok": True, "data": {"price": 187.42}, "latency_ms": 3.0},
    {"ok": False, "error": "bad", "error_type": "invalid_arguments", "latency_ms": 1.0},
    {"ok": False, "error": "no such tool", "error_type": "unknown_tool"},
    {"ok": False, "error": "slow", "error_type": "timeout"},
    {"ok": False, "error": "boom", "error_type": "server_error"},
    {"ok": False, "error": "nope", "error_type": "tool_error"},
    {"ok": "yes"},
    {},
]
GTS = [
    {
        "task_id": "q1",
        "complexity": "simple",
        "max_turns": 4,
        "success": {"must_call_tool": "get_last_quote"},
        "tool_sequence": [{"step": 1, "server": "polygon", "tool": "get_last_quote", "params": {"ticker": "AAPL"}}],
        "limits": {"max_servers": 1, "max_tools": 2},
        "answer": "187.42",
        "allowed_tools": ["get_last_quote", "run_python"],
    },
    {
        "task_id": "q2",
        "complexity": "medium",
        "max_turns": 6,
        "success": {"must_call_tool": "search", "must_call_tools": ["search", "post_message"]},
        "tool_sequence": [{"step": 1, "tool": "search", "params": {}}, {"step": 2, "tool": "post_message", "params": {}}],
        "limits": {"max_servers": 2, "max_tools": 3},
        "answer": None,
    },
    {"task_id": "odd", "success": "not a dict", "tool_sequence": {"oops": 1}, "answer": ["a", 1], "allowed_tools": "x"},
]


def random_json(rng, depth=0):
    choice = rng.randrange(8 if depth < 4 else 5)
    if choice == 0:
        return None
    if choice == 1:
        return rng.choice([True, False])
    if choice == 2:
        return rng.choice([0, -1, 3.5, 1e308, 2**70])
    if choice in (3, 4):
        return random_text(rng, rng.randrange(12))
    if choice == 5:
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {random_text(rng, rng.randrange(1, 8)): random_json(rng, depth + 1) for _ in range(rng.randrange(4))}


def random_text(rng, length):
    pools = [
        lambda: chr(rng.randrange(32, 127)),
        lambda: chr(rng.randrange(0, 0x110000)),
        lambda: rng.choice("{}[]\":,<>/\\ \n\t"),
    ]
    pick = rng.choice(pools)
    return "".join(pick() for _ in range(length))


def adversarial_action(rng):
    style = rng.choice(FORMATS)
    kind = rng.randrange(12)
    if kind == 0:
        return random_text(rng, rng.randrange(200))
    if kind == 1:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(300))).decode(rng.choice(["utf-8", "latin-1"]), errors="replace")
    if kind == 2:
        return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randrange(1, 60)))
    if kind == 3:
        text = format_tool_call("get_last_quote", {"ticker": "AAPL", "x": random_json(rng)}, style=style)
        return text[: rng.randrange(len(text) + 1)]
    if kind == 4:
        text = list(format_tool_call(rng.choice(["get_last_quote", "search", "a.b"]), {"q": random_json(rng)}, style=style))
        for _ in range(rng.randrange(1, 6)):
            pos = rng.randrange(len(text))
            op = rng.randrange(3)
            if op == 0:
                del text[pos]
            elif op == 1:
                text.insert(pos, rng.choice(FRAGMENTS))
            else:
                text[pos] = rng.choice(FRAGMENTS)
        return "".join(text)
    if kind == 5:
        name, args = random_json(rng), random_json(rng)
        return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + rng.choice(["</tool_call>", "", "</tool_call><tool_call>"])
    if kind == 6:
        depth = rng.randrange(10, 3000)
        return "<tool_call>" + '{"name": "f", "arguments": ' + "{\"a\": " * depth + "1" + "}" * rng.randrange(depth + 2)
    if kind == 7:
        return rng.choice(["x", "{", "<tool_call>", '{"a": "', "<answer>"]) * rng.randrange(1_000, 30_000)
    if kind == 8:
        inner = format_tool_call("get_last_quote", {"ticker": "AAPL"}, style=style)
        return rng.choice(["</tool_call>", "<tool_call>", "</answer>", "<tool>"]) + inner + "<answer>" + random_text(rng, 20)
    if kind == 9:
        return "<answer>" + random_text(rng, rng.randrange(40)) + rng.choice(["</answer>", ""]) + random_text(rng, 10)
    if kind == 10:
        return json.dumps({"tool": random_json(rng), "arguments": random_json(rng)}, ensure_ascii=rng.random() < 0.5)
    return "```json\n" + json.dumps({"name": "get_last_quote", "arguments": random_json(rng)}) + "\n```" + random_text(rng, 5)


def check_action(action):
    assert action.kind in KINDS
    assert isinstance(action.raw, str)
    if action.kind == "tool_call":
        assert isinstance(action.name, str) and action.name.strip() == action.name and action.name
        assert isinstance(action.arguments, dict)
    elif action.kind == "answer":
        assert isinstance(action.answer, str)
    elif action.kind == "malformed":
        assert isinstance(action.error, str) and action.error
    else:
        assert action.name is None and action.arguments is None


def check_reward(result):
    total = result["total_reward"]
    assert isinstance(total, float) and math.isfinite(total)
    assert -1.0 <= total <= 1.0
    assert math.isclose(sum(result["components"].values()), total, abs_tol=1e-9)
    assert isinstance(result["task_complete"], bool)


def run_fuzz(count):
    rng = random.Random(SEED)
    weights = HeuristicWeights()
    long_state = RewardState()
    for _ in range(count):
        text = adversarial_action(rng)
        action = parse_action(text, formats=rng.choice([FORMATS, ("hermes",), ("json", "xml")]))
        check_action(action)
        tool_result = rng.choice(TOOL_RESULTS) if action.kind == "tool_call" else None
        gt = rng.choice(GTS)
        check_reward(reward_heuristic(action, None, tool_result, gt, RewardState(), weights))
        check_reward(reward_heuristic(text, None, tool_result, gt, long_state, weights))
    assert long_state.positive_shaping <= weights.shaping_cap + 1e-9
    assert long_state.negative_shaping >= -weights.penalty_cap - 1e-9


def test_fuzz_parser_and_reward():
    run_fuzz(2_000)


@pytest.mark.slow
def test_fuzz_parser_and_reward_full():
    run_fuzz(10_000)
