"""GRPO's prompt order: a seeded shuffle, or the same shuffle dealt round-robin over task families."""

import random
from collections import Counter
from itertools import islice

import pytest

from mcprl.data.sample import SkyRLSample
from mcprl.training.ordering import prompt_stream


def task(i: int, family: str | None, source: str = "rules/test") -> SkyRLSample:
    extra = {"template": family} if family else {}
    return SkyRLSample(source, [{"role": "user", "content": str(i)}],
                       {"method": "rule", "ground_truth": {"task_id": f"t{i}"}}, extra)


SIZES = {"a": 9, "b": 5, "c": 3, "d": 1}
TASKS = [task(i, f) for i, f in enumerate(f for f, n in SIZES.items() for _ in range(n))]


def ids(stream, n: int) -> list[str]:
    return [t.task_id for t in islice(stream, n)]


def test_stratified_draws_every_family_before_repeating_one():
    order = list(islice(prompt_stream(TASKS, seed=3, order="stratified"), len(TASKS)))
    families = [t.family for t in order]
    assert set(families[:4]) == set(SIZES)  # the first four draws: one task of each family
    assert set(families[4:7]) == {"a", "b", "c"}  # then the families that still have tasks
    assert Counter(families) == Counter(SIZES)  # an epoch still draws every task exactly once
    assert sorted(t.task_id for t in order) == sorted(t.task_id for t in TASKS)


def test_shuffle_clusters_families_where_stratified_does_not():
    def families_in_first_draws(order: str, seed: int) -> int:
        return len({t.family for t in islice(prompt_stream(TASKS, seed, order), len(SIZES))})

    assert all(families_in_first_draws("stratified", s) == len(SIZES) for s in range(20))
    assert sum(families_in_first_draws("shuffle", s) < len(SIZES) for s in range(20)) > 10


def test_order_is_reproducible_per_seed_and_fresh_each_epoch():
    n = len(TASKS)
    first = ids(prompt_stream(TASKS, 7, "stratified"), 2 * n)
    assert first == ids(prompt_stream(TASKS, 7, "stratified"), 2 * n)
    assert first[:n] != first[n:]  # a new shuffle for the second epoch
    assert first[:n] != ids(prompt_stream(TASKS, 8, "stratified"), n)


def test_shuffle_keeps_the_shuffled_order_of_earlier_runs():
    """Runs measured before `prompt_order` existed drew this order; resuming them must draw it again."""
    positions = list(range(len(TASKS)))
    random.Random("5:grpo:0").shuffle(positions)
    assert ids(prompt_stream(TASKS, 5, "shuffle"), len(TASKS)) == [TASKS[i].task_id for i in positions]


def test_family_falls_back_to_the_data_source():
    assert task(0, None, source="llm/weather").family == "llm/weather"
    assert task(0, "pe_ratio").family == "pe_ratio"


def test_grpo_draws_from_the_tasks_without_demos_or_the_families_without_demos():
    from mcprl.errors import ConfigError
    from mcprl.training.loop.prompts import without_demo

    def marked(i, family, demo):
        return SkyRLSample("families/test", [{"role": "user", "content": str(i)}],
                           {"method": "rule", "ground_truth": {"task_id": f"t{i}"}},
                           {"family": family, "template": family, "demo": demo})

    tasks = [marked(0, "net_income", False), marked(1, "quote", False), marked(2, "quote", True),
             marked(3, "net_income", False)]
    assert [t.task_id for t in without_demo(tasks, "no_demo", ["net_income"])] == ["t0", "t1", "t3"]
    assert [t.task_id for t in without_demo(tasks, "no_demo_families", ["net_income"])] == ["t0", "t3"]
    with pytest.raises(ConfigError, match="no training task is without an SFT demo"):
        without_demo(tasks, "no_demo_families", ["year_high"])
