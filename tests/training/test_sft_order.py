"""sft.order: demos dealt round-robin over their tasks' families, every demo once a pass, seeded."""

import random
from collections import Counter
from itertools import islice

from mcprl.data.sample import SkyRLSample
from mcprl.training.sft import SFTExample, batches
from mcprl.training.loop.sft import demo_families

SIZES = {"a": 12, "b": 6, "c": 3, "d": 2}
FAMILIES = [f for f, n in SIZES.items() for _ in range(n)]
EXAMPLES = [SFTExample(list(range(1, 2 + i % 5)), [True] * (1 + i % 5)) for i in range(len(FAMILIES))]
INDEX = {id(x): i for i, x in enumerate(EXAMPLES)}


def drawn(seed: int, n: int, families=FAMILIES, batch_size: int = 1) -> list[int]:
    stream = batches(EXAMPLES, batch_size, random.Random(seed), families)
    return [INDEX[id(x)] for batch in islice(stream, n) for x in batch]


def test_the_first_steps_span_every_family_where_a_shuffle_clusters():
    for seed in range(20):
        assert {FAMILIES[i] for i in drawn(seed, 8)} == set(SIZES)  # two demos of each family first
    assert sum({FAMILIES[i] for i in drawn(seed, 8, None)} != set(SIZES) for seed in range(20)) > 10


def test_every_pass_draws_every_demo_once_in_a_fresh_seeded_order():
    n = len(EXAMPLES)
    both = drawn(3, 2 * n)
    assert sorted(both[:n]) == sorted(both[n:]) == list(range(n))
    assert Counter(FAMILIES[i] for i in both[:n]) == Counter(SIZES)
    assert both[:n] != both[n:]
    assert both == drawn(3, 2 * n)  # what a resume redraws
    assert both[:n] != drawn(4, n)


def test_batches_of_several_demos_take_consecutive_draws():
    singles, pairs = drawn(5, 8), drawn(5, 4, batch_size=2)
    assert pairs == singles


def test_a_demo_takes_its_tasks_family_and_a_demo_of_no_training_task_the_family_of_none():
    tasks = [SkyRLSample("rules/test", [{"role": "user", "content": "q"}], {"ground_truth": {"task_id": f"t{i}"}},
                         {"template": family}) for i, family in enumerate(["pe_ratio", "sector"])]
    demos = [{"task_id": "t1", "messages": []}, {"task_id": "elsewhere", "messages": []}, {"messages": []}]
    assert demo_families(demos, tasks) == ["sector", "", ""]
