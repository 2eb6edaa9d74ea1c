"""Heuristic reward: each component, caps, repeated calls, outcomes and the solved > unsolved order."""

import math
import random

import pytest

from mcprl.protocol.parsing import format_answer, format_tool_call, parse_action
from mcprl.rewards.heuristic import (
    HeuristicWeights, RewardState, episode_end, names_match, required_tools, reward_heuristic,
)

OK = {"ok": True, "data": {"price": 187.42}, "latency_ms": 2.0}


def err(error_type):
    return {"ok": False, "error": "failed", "error_type": error_type, "latency_ms": 1.0}


def quote_task(**overrides):
    gt = {
        "task_id": "finance-001",
        "complexity": "medium",
        "max_turns": 5,
        "success": {"must_call_tool": "get_last_quote"},
        "tool_sequence": [
            {"step": 1, "server": "polygon", "tool": "get_last_quote", "params": {"ticker": "AAPL"}},
            {"step": 2, "server": "python", "tool": "run_python", "params": {"code": "..."}},
        ],
        "limits": {"max_servers": 2, "max_tools": 3},
        "answer": "187.42",
        "allowed_tools": ["get_last_quote", "run_python", "get_news"],
    }
    gt.update(overrides)
    return gt


def step(gt, state, text, result=None, weights=HeuristicWeights(), tool_name=None):
    out = reward_heuristic(text, tool_name, result, gt, state, weights)
    assert math.isclose(sum(out["components"].values()), out["total_reward"], abs_tol=1e-9)
    assert -1.0 <= out["total_reward"] <= 1.0
    return out


def quote_call(ticker="AAPL", name="get_last_quote"):
    return format_tool_call(name, {"ticker": ticker})


def test_first_correct_call_earns_every_shaping_component_up_to_the_cap():
    out = step(quote_task(), state := RewardState(), quote_call(), OK)
    c = out["components"]
    assert (c["tool_allowed"], c["first_call"], c["sequence_step"], c["tool_ok"]) == (0.2, 0.4, 0.2, 0.1)
    assert out["total_reward"] == pytest.approx(0.5)
    assert c["shaping_cap"] == pytest.approx(-0.4)
    assert not out["task_complete"] and state.next_step == 1 and state.positive_shaping == pytest.approx(0.5)


def test_components_without_the_cap():
    weights = HeuristicWeights(shaping_cap=0.55, penalty_cap=0.4)
    state = RewardState()
    first = step(quote_task(), state, format_tool_call("get_news", {"q": "apple"}), OK, weights)["components"]
    assert first == {"tool_allowed": 0.2, "tool_ok": 0.1}  # not must_call_tool, not the next step
    second = step(quote_task(), state, quote_call(), OK, weights)["components"]
    assert "first_call" not in second and second["sequence_step"] == 0.2  # first call already happened
    assert state.next_step == 1


def test_sequence_pointer_needs_order_success_and_server():
    state = RewardState()
    gt = quote_task()
    step(gt, state, format_tool_call("run_python", {"code": "1"}), OK)  # step 2 before step 1
    assert state.next_step == 0
    step(gt, state, quote_call(), err("invalid_arguments"))  # right tool, failed
    assert state.next_step == 0
    step(gt, state, quote_call(name="yahoo.get_last_quote"), OK)  # wrong server
    assert state.next_step == 0
    step(gt, state, quote_call(name="polygon.get_last_quote"), OK)
    step(gt, state, format_tool_call("run_python", {"code": "2"}), OK)
    assert state.next_step == 2


@pytest.mark.parametrize(
    "result, component, value",
    [
        (err("unknown_tool"), "unknown_tool", -0.2),
        (err("timeout"), "timeout", -0.2),
        (err("invalid_arguments"), "invalid_arguments", -0.3),
        (err("tool_error"), "tool_error", -0.05),
    ],
)
def test_tool_failures_are_penalised(result, component, value):
    weights = HeuristicWeights(first_call=0.0)
    out = step(quote_task(), RewardState(), quote_call(), result, weights)
    assert out["components"][component] == value
    assert "tool_ok" not in out["components"] and "sequence_step" not in out["components"]
    assert ("tool_allowed" in out["components"]) is (component != "unknown_tool")


def test_tool_outside_allowed_list_is_penalised_and_absent_list_allows_all():
    call = format_tool_call("delete_everything", {})
    out = step(quote_task(), RewardState(), call, OK)
    assert out["components"]["disallowed_tool"] == -0.2 and "tool_allowed" not in out["components"]
    refused = step(quote_task(), RewardState(), call, err("disallowed_tool"))  # the env refused to run it
    assert refused["components"] == {"disallowed_tool": -0.2}
    gt = quote_task()
    del gt["allowed_tools"]
    assert step(gt, RewardState(), call, OK)["components"]["tool_allowed"] == 0.2


def test_malformed_and_prose_are_penalised():
    assert step(quote_task(), RewardState(), '<tool_call>{"name": }</tool_call>')["components"] == {"malformed": -0.2}
    assert step(quote_task(), RewardState(), "Hmm, let me think.")["components"] == {"no_action": -0.05}
    parsed = parse_action('<tool_call>{"name": 1}</tool_call>')
    assert step(quote_task(), RewardState(), parsed)["total_reward"] == pytest.approx(-0.2)


def test_penalties_are_capped_per_episode():
    state = RewardState()
    totals = [step(quote_task(), state, "<tool_call>oops</tool_call>")["total_reward"] for _ in range(5)]
    assert totals[:2] == pytest.approx([-0.2, -0.2])
    assert totals[2:] == pytest.approx([0.0, 0.0, 0.0])
    assert state.negative_shaping == pytest.approx(-0.4)


def test_shaping_cannot_be_farmed():
    state = RewardState()
    total = sum(
        step(quote_task(), state, format_tool_call("get_news", {"q": f"apple {i}"}), OK)["total_reward"] for i in range(20)
    )
    assert total == pytest.approx(HeuristicWeights().shaping_cap)
    assert not state.solved


def test_repeated_identical_calls_earn_no_positive_shaping():
    weights = HeuristicWeights(shaping_cap=0.55, penalty_cap=0.4, repeated_call=-0.05)
    state = RewardState()
    gt = quote_task()
    step(gt, state, format_tool_call("get_news", {"q": "apple", "n": 1}), OK, weights)
    again = step(gt, state, '{"tool": "get_news", "arguments": {"n": 1, "q": "apple"}}', OK, weights)
    assert again["components"] == {"repeated_call": -0.05}
    different = step(gt, state, format_tool_call("get_news", {"q": "apple", "n": 2}), OK, weights)
    assert different["total_reward"] > 0


def test_correct_answer_solves_after_the_required_tool():
    state = RewardState()
    step(quote_task(), state, quote_call(), OK)
    out = step(quote_task(), state, format_answer("$187.42"))
    assert out["components"] == {"solved": 1.0} and out["task_complete"]
    assert state.episode_return == pytest.approx(1.5)


def test_wrong_answer_is_penalised():
    state = RewardState()
    step(quote_task(), state, quote_call(), OK)
    out = step(quote_task(), state, format_answer("150.00"))
    assert out["components"] == {"wrong_answer": -0.3} and not out["task_complete"]


def test_correct_answer_without_the_required_tool_is_not_a_solve():
    out = step(quote_task(), RewardState(), format_answer("187.42"))
    assert out["components"] == {"ungrounded_answer": -0.3} and not out["task_complete"]
    relaxed = HeuristicWeights(require_grounding=False)
    assert step(quote_task(), RewardState(), format_answer("187.42"), weights=relaxed)["task_complete"]


def test_every_must_call_tool_is_required():
    gt = quote_task(success={"must_call_tool": "get_last_quote", "must_call_tools": ["get_last_quote", "run_python"]})
    assert required_tools(gt) == ["get_last_quote", "run_python"]
    state = RewardState()
    step(gt, state, quote_call(), OK)
    step(gt, state, format_tool_call("run_python", {"code": "x"}), err("timeout"))
    assert not step(gt, state, format_answer("187.42"))["task_complete"]


def action_task():
    return quote_task(answer=None, success={"must_call_tool": "get_last_quote"})


def test_answer_free_task_is_solved_by_the_last_sequence_step():
    state = RewardState()
    gt = action_task()
    assert not step(gt, state, quote_call(), OK)["task_complete"]
    out = step(gt, state, format_tool_call("run_python", {"code": "x"}), OK)
    assert out["task_complete"] and out["components"]["solved"] == 1.0 and out["total_reward"] == 1.0
    later = step(gt, state, format_answer("done"))
    assert later["task_complete"] and later["total_reward"] == 0.0


def test_answer_free_task_answered_early_is_premature():
    out = step(action_task(), RewardState(), format_answer("done"))
    assert out["components"] == {"premature_answer": -0.3} and not out["task_complete"]


def test_answer_required_without_expected_answer_solves_on_the_answer():
    gt = quote_task(answer=None, success={"must_call_tool": "get_last_quote", "answer_required": True})
    state = RewardState()
    step(gt, state, quote_call(), OK)
    assert not step(gt, state, format_tool_call("run_python", {"code": "x"}), OK)["task_complete"]
    assert step(gt, state, format_answer("posted"))["components"] == {"solved": 1.0}


def test_solved_beats_unsolved_at_the_extremes():
    w = HeuristicWeights()
    assert w.shaping_cap + w.wrong_answer < w.solved - w.penalty_cap
    best_unsolved = RewardState()
    for i in range(6):
        step(quote_task(), best_unsolved, format_tool_call("get_news", {"q": str(i)}), OK)
    step(quote_task(), best_unsolved, quote_call(), OK)
    worst_solved = RewardState()
    for _ in range(4):
        step(quote_task(), worst_solved, "<tool_call>{</tool_call>")
    step(quote_task(), worst_solved, quote_call(), OK)
    step(quote_task(), worst_solved, format_answer("187.42"))
    assert worst_solved.solved and not best_unsolved.solved
    assert worst_solved.episode_return > best_unsolved.episode_return


def test_solved_beats_unsolved_over_random_episodes():
    rng = random.Random(7)
    pool = [
        (quote_call(), OK),
        (quote_call("MSFT"), OK),
        (format_tool_call("run_python", {"code": "x"}), OK),
        (format_tool_call("get_news", {"q": "x"}), err("timeout")),
        (format_tool_call("nope", {}), err("unknown_tool")),
        (format_tool_call("delete", {}), OK),
        ("<tool_call>{bad", None),
        ("thinking...", None),
    ]
    returns = {True: [], False: []}
    for gt in (quote_task(), action_task()):
        for _ in range(400):
            state = RewardState()
            for _ in range(rng.randrange(0, 6)):
                text, result = rng.choice(pool)
                step(gt, state, text, result)
            if not state.solved and rng.random() < 0.7:
                step(gt, state, format_answer(rng.choice(["187.42", "12", "done"])))
            returns[state.solved].append(state.episode_return)
    assert returns[True] and returns[False]
    assert min(returns[True]) > max(returns[False])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"shaping_cap": 0.7}, "must exceed shaping_cap"),
        ({"solved": 1.5}, "must be in \\(0, 1\\]"),
        ({"malformed": 0.2}, "must be <= 0"),
        ({"tool_ok": -0.1}, "must be >= 0"),
        ({"answer_after_error": -0.1}, "answer_after_error=-0.1 is too weak"),
        ({"shaping_cap": 0.55, "penalty_cap": 0.4, "answer_after_error": -0.2}, "make it < -0.25"),
    ],
)
def test_weights_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HeuristicWeights(**kwargs)


def test_answer_after_error_can_be_turned_off():
    """0 is the ablation (the reward before 2026-12-07's evening): allowed though it leaves a made-up answer > 0."""
    assert HeuristicWeights(answer_after_error=0.0).answer_after_error == 0.0


def test_names_match_plain_and_qualified():
    assert names_match("get_last_quote", "get_last_quote", "polygon")
    assert names_match("polygon.get_last_quote", "get_last_quote", "polygon")
    assert names_match("polygon.get_last_quote", "polygon.get_last_quote")
    assert not names_match("yahoo.get_last_quote", "get_last_quote", "polygon")
    assert not names_match("get_news", "get_last_quote")
    assert not names_match("get_news", None)


def test_env_resolved_tool_name_is_used():
    out = step(quote_task(), RewardState(), quote_call(), OK, tool_name="polygon.get_last_quote")
    assert out["components"]["sequence_step"] == 0.2


def test_invalid_arguments_never_net_positive():
    out = step(quote_task(), RewardState(), quote_call(), err("invalid_arguments"), HeuristicWeights(first_call=0.0))
    assert out["total_reward"] < 0


def test_must_call_with_checks_the_arguments_of_side_effects():
    gt = {"task_id": "post", "max_turns": 3, "answer": None,
          "success": {"must_call_tool": "post_message",
                      "must_call_with": [{"tool": "post_message", "params": {"channel": "general", "text": "AAPL up 1.25%"}}]},
          "tool_sequence": [{"step": 1, "server": "slack", "tool": "post_message", "params": {}}]}
    wrong = step(gt, RewardState(), format_tool_call("post_message", {"channel": "random", "text": "AAPL up 1.25%"}), OK)
    assert wrong["task_complete"] is False
    right = step(gt, RewardState(), format_tool_call("post_message", {"channel": "#general", "text": "aapl up 1.25 %"}), OK)
    assert right["task_complete"] is True


def test_giving_up_is_no_better_than_a_wrong_answer():
    gt = quote_task()
    stalled, guessed = RewardState(), RewardState()
    stall = [step(gt, stalled, quote_call(), OK)["total_reward"], episode_end(gt, stalled)["total_reward"]]
    guess = [step(gt, guessed, quote_call(), OK)["total_reward"],
             step(gt, guessed, format_answer("1.00"), None)["total_reward"]]
    assert sum(stall) <= sum(guess)
    assert -1.0 <= min(stall) and max(stall) <= 1.0


def test_giving_up_after_good_calls_earns_no_more_than_a_blind_wrong_answer():
    """At -0.3 a stall kept its shaping and out-earned an early guess, and GRPO learned to stop answering."""
    gt = quote_task()
    stalled = RewardState()
    stall = [step(gt, stalled, quote_call(), OK)["total_reward"],
             step(gt, stalled, format_tool_call("run_python", {"code": "print(1)"}), OK, tool_name="run_python")["total_reward"],
             episode_end(gt, stalled)["total_reward"]]
    guess = step(gt, RewardState(), format_answer("1.00"), None)["total_reward"]
    assert sum(stall) == pytest.approx(0.5 - 0.8)
    assert sum(stall) <= guess == pytest.approx(-0.3)


def test_an_answer_that_skips_a_required_post_earns_no_more_than_a_wrong_one():
    """At 0.0 a correct answer that skipped the post of "compute X, post it, answer X" kept its shaping (0.5)
    and out-earned a wrong answer (0.2), so GRPO would favour skipping in a group holding both (docs/rewards.md)."""
    gt = quote_task(success={"must_call_tool": "get_last_quote",
                             "must_call_with": [{"tool": "post_message", "params": {"channel": "general"}}]})
    skipped, wrong = RewardState(), RewardState()
    for state, answer in ((skipped, "187.42"), (wrong, "150.00")):
        step(gt, state, quote_call(), OK)
        out = step(gt, state, format_answer(answer))
        assert not out["task_complete"]
    assert skipped.episode_return <= wrong.episode_return


def _episode(gt, turns):
    """Play `turns`; like the env, add `episode_end` only when the episode stops without an answer."""
    state = RewardState()
    total = sum(step(gt, state, text, result)["total_reward"] for text, result in turns)
    answered = parse_action(turns[-1][0]).kind == "answer"
    return total + (0.0 if answered else episode_end(gt, state)["total_reward"]), state


UNKNOWN_APPLE = {"ok": False, "error": "unknown ticker 'Apple': did you mean 'AAPL'?", "error_type": "tool_error"}


def test_an_answer_made_up_after_an_error_is_never_rewarded_and_recovery_pays():
    """After 'unknown ticker ...: did you mean ...?', retrying and answering right out-earns everything else; a
    number made up after the error returns < 0 and no more than running out of turns after the same calls (at
    wrong_answer -0.3 it kept its shaping, returned about +0.15 in GRPO rollouts, and GRPO raised
    answer_after_error from 0% to 8.2%: docs/experiments/2026-12-07-a-made-up-answer-after-an-error.md)."""
    gt = quote_task(tool_sequence=quote_task()["tool_sequence"][:1])
    recovered, state = _episode(gt, [(quote_call("Apple"), UNKNOWN_APPLE), (quote_call(), OK),
                                     (format_answer("187.42"), None)])
    assert state.solved
    made_up, state = _episode(gt, [(quote_call("Apple"), UNKNOWN_APPLE), (format_answer("50"), None)])
    assert not state.solved
    gave_up, _ = _episode(gt, [(quote_call("Apple"), UNKNOWN_APPLE)])
    guessed_right, _ = _episode(gt, [(quote_call("Apple"), UNKNOWN_APPLE), (format_answer("187.42"), None)])
    assert recovered > 0.9 > 0 > guessed_right and made_up < 0
    assert made_up <= gave_up


def test_a_made_up_answer_after_a_late_error_loses_its_shaping():
    """The first call earned the whole shaping budget; the second failed and the answer came right after it."""
    gt = quote_task()
    python_error = {"ok": False, "error": "NameError: name 'x' is not defined", "error_type": "tool_error"}
    python = format_tool_call("run_python", {"code": "print(x)"})
    state = RewardState()
    step(gt, state, quote_call(), OK)
    step(gt, state, python, python_error, tool_name="run_python")
    out = step(gt, state, format_answer("50"))
    weights = HeuristicWeights()
    assert out["components"]["wrong_answer"] + out["components"]["answer_after_error"] == pytest.approx(
        weights.unanswered)
    assert state.episode_return < 0
    assert sum(out["components"].values()) == pytest.approx(out["total_reward"])


def test_a_wrong_answer_after_a_repaired_error_is_only_wrong():
    """The retry with the server's suggestion came back ok: a wrong answer then is an ordinary wrong answer."""
    gt = quote_task(tool_sequence=quote_task()["tool_sequence"][:1])
    state = RewardState()
    step(gt, state, quote_call("Apple"), UNKNOWN_APPLE)
    step(gt, state, quote_call(), OK)
    out = step(gt, state, format_answer("50"))
    assert out["components"].get("wrong_answer") == HeuristicWeights().wrong_answer
    assert "answer_after_error" not in out["components"]
