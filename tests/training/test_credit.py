"""Turn-level credit: Q(s, a) - V(s) over a group's tree of actions, summing along an episode to its own
advantage, and turns located by the runs of trained tokens."""

import pytest
import torch

from mcprl.training.credit import action_key, episode_keys, state_action_credit, turn_spans


def _call(tool: str, **arguments) -> tuple:
    return action_key({"kind": "tool_call", "tool": tool, "arguments": arguments})


A, B, C = _call("get_quote", ticker="MCD"), _call("get_previous_close", ticker="MCD"), _call("run_python", code="1")
RIGHT = action_key({"kind": "answer", "action": "<answer>1.59</answer>"})
WRONG = action_key({"kind": "answer", "action": "<answer>2</answer>"})


def test_action_keys_ignore_argument_order_and_whitespace_but_not_values():
    one = action_key({"kind": "tool_call", "tool": "f", "arguments": {"a": 1, "b": 2}})
    assert one == action_key({"kind": "tool_call", "tool": "f", "arguments": {"b": 2, "a": 1}})
    assert one != action_key({"kind": "tool_call", "tool": "f", "arguments": {"a": 1, "b": 3}})
    assert action_key({"kind": "answer", "action": "<answer>1.59</answer>\n"}) == RIGHT
    assert episode_keys({"trace": [{"kind": "tool_call", "tool": "get_quote", "arguments": {"ticker": "MCD"}}]}) == [A]
    assert episode_keys({}) is None and episode_keys(None) is None


def test_credit_lands_where_episodes_part_and_sums_to_each_episode_advantage():
    """Four episodes: two solve (A B RIGHT), one skips B (A WRONG), one calls C after B (A B C WRONG)."""
    values = [0.8, 0.8, -0.9, -0.7]
    actions = [[A, B, RIGHT], [A, B, RIGHT], [A, WRONG], [A, B, C, WRONG]]
    credit = state_action_credit(values, ["g"] * 4, actions)
    assert [c[0] for c in credit] == [0.0] * 4  # everyone called A first
    assert credit[2][1] == pytest.approx(-0.9 - 0.0)  # at [A]: V = mean of all four = 0.0
    assert credit[0][1] == pytest.approx((0.8 + 0.8 - 0.7) / 3 - 0.0)
    assert credit[3][2] == pytest.approx(-0.7 - (0.8 + 0.8 - 0.7) / 3)  # C where the others answered
    assert credit[3][3] == 0.0  # after C it was alone: already credited at C
    mean = sum(values) / 4
    for value, turns in zip(values[2:], credit[2:]):  # unique action sequences
        assert sum(turns) == pytest.approx(value - mean)


def test_groups_do_not_share_states_and_episodes_without_actions_take_no_part():
    credit = state_action_credit([1.0, -1.0, 5.0, 0.0], ["g", "h", "g", "g"], [[A, RIGHT], [A, WRONG], None, [A, WRONG]])
    assert credit[1] == [0.0, 0.0]  # alone in group h
    assert credit[2] is None
    assert credit[0] == [0.0, pytest.approx(0.5)] and credit[3] == [0.0, pytest.approx(-0.5)]


def test_turn_spans_run_from_each_trained_run_to_the_next():
    mask = torch.tensor([1, 1, 0, 0, 1, 1, 1, 0, 0, 0])
    assert turn_spans(mask) == [(0, 4), (4, 10)]
    assert turn_spans(torch.tensor([0, 1, 1, 0])) == [(1, 4)]
    assert turn_spans(torch.zeros(3)) == []
