from __future__ import annotations

import itertools
from math import comb

import pytest

from mcprl.eval.errors import TrajectoryFormatError
from mcprl.eval.metrics import aggregate, pass_at_k, pass_hat_k
from tests.eval.scripted import (
    TASKS,
    always_correct,
    answer_turn,
    malformed_turn,
    mixed,
    rollout,
    tool_turn,
    trajectory,
)


def test_pass_at_k_hand_checked():
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - comb(3, 2) / comb(5, 2)) == pytest.approx(0.7)
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k: every 3-subset holds a success
    assert pass_hat_k(5, 2, 2) == pytest.approx(comb(2, 2) / comb(5, 2)) == pytest.approx(0.1)
    assert pass_hat_k(5, 1, 2) == 0.0
    assert pass_hat_k(4, 4, 4) == 1.0


def test_pass_at_k_matches_brute_force_over_subsets():
    for n in range(1, 8):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                subsets = list(itertools.combinations(outcomes, k))
                assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
                assert pass_hat_k(n, c, k) == pytest.approx(sum(all(s) for s in subsets) / len(subsets))


def test_pass_at_k_is_stable_for_large_n():
    assert 0.0 < pass_at_k(2000, 3, 10) < 1.0
    assert pass_at_k(2000, 3, 10) == pytest.approx(1 - comb(1997, 10) / comb(2000, 10))


@pytest.mark.parametrize("n,c,k", [(5, 6, 1), (5, -1, 1), (5, 2, 0), (3, 1, 4)])
def test_pass_at_k_rejects_impossible_inputs(n, c, k):
    with pytest.raises(ValueError, match=r"n=\d"):
        pass_at_k(n, c, k)


def test_always_correct_policy_scores_one():
    results = aggregate(rollout(always_correct, k=4))
    assert results["k"] == 4 and results["n_tasks"] == len(TASKS)
    for group in [results["overall"], *results["by_complexity"].values(), *results["by_data_source"].values()]:
        assert group["pass@1"] == group["pass@4"] == group["pass^4"] == group["success_rate"] == 1.0
        assert group["tool_error_rate"] == 0.0 and group["answer_rate"] == 1.0


def test_aggregate_on_hand_counted_trajectories():
    easy, hard = TASKS[0], TASKS[4]  # finance-simple-0, finance-complex-0
    trajs = [trajectory(easy, i, [tool_turn(), answer_turn()], True) for i in range(4)]
    trajs += [trajectory(hard, 0, [tool_turn(), tool_turn(ok=False, error_type="timeout"), answer_turn()], True)]
    trajs += [trajectory(hard, i, [malformed_turn(), answer_turn(0.0)], False) for i in (1, 2)]
    trajs += [trajectory(hard, 3, [tool_turn()], False, stop_reason="context_overflow")]
    r = aggregate(trajs, ks=(1, 2, 4))
    o = r["overall"]
    assert o["pass@1"] == pytest.approx((1 + 1 / 4) / 2)
    assert o["pass@2"] == pytest.approx((1 + (1 - comb(3, 2) / comb(4, 2))) / 2)
    assert o["pass@4"] == pytest.approx(1.0)
    assert o["pass^4"] == pytest.approx(0.5)
    assert o["tool_error_rate"] == pytest.approx(1 / 7)  # 7 calls, one timeout
    assert o["malformed_rate"] == pytest.approx(2 / 16)  # turns: 4x2 + 3 + 2x2 + 1
    assert o["mean_tool_calls"] == pytest.approx(7 / 8)
    assert o["tool_call_rate"] == pytest.approx(6 / 8)
    assert o["context_overflow_rate"] == pytest.approx(1 / 8)
    assert o["answer_rate"] == pytest.approx(7 / 8)
    assert list(r["by_complexity"]) == ["simple", "complex"]
    assert r["by_complexity"]["complex"]["pass@1"] == pytest.approx(0.25)


def test_rates_without_calls_are_none_not_zero():
    r = aggregate([trajectory(TASKS[0], 0, [answer_turn()], True)])
    assert r["overall"]["tool_error_rate"] is None
    assert r["k"] == 1 and "pass^1" not in r["overall"]


def test_pass_at_k_skips_tasks_with_too_few_samples():
    trajs = rollout(mixed, k=3, tasks=TASKS[:2]) + rollout(mixed, k=1, tasks=TASKS[2:3])
    r = aggregate(trajs, ks=(1, 3))
    assert r["overall"]["n_tasks"] == 3
    assert r["by_complexity"]["medium"]["pass@3"] is None
    assert r["by_complexity"]["medium"]["pass@1"] is not None


def test_bad_row_names_the_field():
    row = trajectory(TASKS[0], 0, [answer_turn()], True)
    del row["success"]
    with pytest.raises(TrajectoryFormatError, match="success"):
        aggregate([row])


def test_recovery_and_made_up_answers_after_errors():
    """Recovery counts solved episodes among those with a failed call; a wrong answer while the last call
    had failed is the number made up after an error."""
    task = TASKS[0]
    recovered = trajectory(task, 0, [tool_turn(ok=False, error_type="tool_error"), tool_turn(), answer_turn()], True)
    made_up = trajectory(task, 1, [tool_turn(ok=False, error_type="tool_error"), answer_turn(-0.3)], False)
    wrong_after_ok = trajectory(task, 2, [tool_turn(ok=False, error_type="tool_error"), tool_turn(), answer_turn(-0.3)],
                                False)
    clean = trajectory(task, 3, [tool_turn(), answer_turn()], True)
    overall = aggregate([recovered, made_up, wrong_after_ok, clean])["overall"]
    assert overall["failed_call_rate"] == pytest.approx(3 / 4)
    assert overall["recovery_rate"] == pytest.approx(1 / 3)
    assert overall["answer_after_error_rate"] == pytest.approx(1 / 3)
    assert overall["false_completion_rate"] == pytest.approx(2 / 4)
    assert aggregate([clean])["overall"]["recovery_rate"] is None  # nothing failed: no rate, not 0


def test_metrics_by_family_and_by_style():
    rows = [dict(trajectory(TASKS[0], 0, [tool_turn(), answer_turn()], True), family="last_price",
                 env_extras={"style": "short"}),
            dict(trajectory(TASKS[1], 0, [answer_turn(-0.3)], False), family="net_income", env_extras={"style": "ticker"})]
    agg = aggregate(rows)
    assert agg["by_family"]["last_price"]["pass@1"] == 1.0 and agg["by_family"]["net_income"]["pass@1"] == 0.0
    assert set(agg["by_style"]) == {"short", "ticker"}
