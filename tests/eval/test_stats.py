"""pass@1's interval and the paired test between evals: the numbers, and where they show up."""

from __future__ import annotations

import random

import pytest

from mcprl.eval.compare import compare_renderable, paired_evals
from mcprl.eval.metrics import CI_KEY
from mcprl.eval.render import results_renderable
from mcprl.eval.report import paired_lines
from mcprl.eval.results import build_results
from mcprl.eval.stats import paired, sign_test, wilson_interval
from tests.eval.scripted import always_correct, mixed, rollout

from .test_compare_cli import render


def test_wilson_interval_known_values_and_edges():
    low, high = wilson_interval(18 / 24, 24)  # 75% of the quickstart's 24 held-out tasks
    assert (low, high) == (pytest.approx(0.551, abs=1e-3), pytest.approx(0.880, abs=1e-3))
    assert wilson_interval(0.0, 24) == (0.0, pytest.approx(0.138, abs=1e-3))
    assert wilson_interval(1.0, 24) == (pytest.approx(0.862, abs=1e-3), pytest.approx(1.0))
    assert wilson_interval(0.5, 0) is None
    narrow = wilson_interval(0.75, 240)
    assert low < narrow[0] < 0.75 < narrow[1] < high


def test_wilson_interval_covers_the_true_rate_about_95_percent_of_the_time():
    rng = random.Random(0)
    hits = 0
    for _ in range(4000):
        successes = sum(rng.random() < 0.75 for _ in range(24))
        low, high = wilson_interval(successes / 24, 24)
        hits += low <= 0.75 <= high
    assert 0.92 < hits / 4000 < 0.98


def test_sign_test_is_mcnemars_exact_test():
    assert sign_test(4, 0) == pytest.approx(0.125)  # four tasks fixed, none broken: still p = 1/8
    assert sign_test(10, 0) == pytest.approx(2 / 1024)
    assert sign_test(1, 1) == 1.0 and sign_test(0, 0) == 1.0
    assert sign_test(7, 2) == sign_test(2, 7) == pytest.approx(0.1797, abs=1e-4)


def test_paired_counts_only_shared_tasks():
    test = paired({"t1": 0.0, "t2": 1.0, "t3": 1.0, "t4": 0.0},
                  {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.5, "t5": 1.0})
    assert (test.tasks, test.better, test.worse, test.same) == (4, 2, 1, 1)
    assert test.delta == pytest.approx(0.125) and test.p_value == 1.0
    assert "better on 2, worse on 1, same on 1" in test.describe("sft", "grpo")
    assert paired({"a": 1.0}, {"b": 1.0}) is None


def test_paired_by_family_counts_a_flipped_family_once():
    """Twelve wordings of one family fixed and two other families broken: p = 0.013 over tasks, and over
    families one up and two down, which is no evidence at all."""
    a = {f"v{i}": 0.0 for i in range(12)} | {"r1": 1.0, "m1": 1.0, "c1": 1.0}
    b = {f"v{i}": 1.0 for i in range(12)} | {"r1": 0.0, "m1": 0.0, "c1": 1.0}
    families = {f"v{i}": "alert_volume" for i in range(12)} | {"r1": "revenue", "m1": "margin", "c1": "calc"}
    test = paired(a, b, families)
    assert (test.better, test.worse) == (12, 2) and test.p_value < 0.05
    assert (test.families, test.families_better, test.families_worse) == (4, 1, 2)
    assert test.families_p_value == 1.0
    assert "over 4 task families: up 1, down 2, p = 1" in test.describe()
    assert paired(a, b).families is None  # no families known
    assert paired(a, b, {"v0": "alert_volume"}).families is None  # not every shared task has one


def with_families(rows: list[dict]) -> list[dict]:
    """Trajectories labelled with a family by their task id's last digit: even or odd."""
    return [dict(r, family="even" if int(r["task_id"][-1]) % 2 == 0 else "odd") for r in rows]


def test_results_carry_each_tasks_family_and_compare_tests_by_it():
    results = build_results(with_families(rollout(mixed)))
    assert set(results["task_family"]) == set(results["per_task"])
    assert set(results["task_family"].values()) <= {"even", "odd"}
    assert build_results(rollout(mixed))["task_family"] == {}  # older trajectories without a family
    better = build_results(with_families(rollout(always_correct)))
    assert "task families: up" in render(compare_renderable(results, better, "sft", "grpo"))


def test_results_carry_per_task_pass1_and_its_interval_and_show_them():
    results = build_results(rollout(mixed))
    assert set(results["per_task"]) == {t["task_id"] for t in rollout(mixed)}
    overall = results["overall"]
    low, high = overall[CI_KEY]
    assert low < overall["pass@1"] < high
    assert all(CI_KEY in group for group in results["by_complexity"].values())
    assert "pass@1 95% CI" in render(results_renderable(results))


def test_compare_and_report_print_the_paired_test():
    a, b = build_results(rollout(mixed)), build_results(rollout(always_correct))
    text = render(compare_renderable(a, b, "sft", "grpo"))
    assert "grpo vs sft, paired over" in text and "sign test p" in text
    tests = paired_evals({"base": a, "sft": a, "grpo": b})
    assert tests["sft_vs_base"].better == tests["sft_vs_base"].worse == 0
    assert tests["grpo_vs_sft"].better > 0 and tests["grpo_vs_sft"].worse == 0
    assert [line.split(",")[0] for line in paired_lines({"base": a, "sft": a, "grpo": b})] == [
        "sft vs base", "grpo vs sft"]
