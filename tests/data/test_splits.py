import random

import pytest

from mcprl.cli.data import write_outputs
from mcprl.data.execute import Generated
from mcprl.data.sample import SkyRLSample, read_samples
from mcprl.data.splits import SplitError, dedup_key, parse_split, split_path, split_samples

TEMPLATES = [
    ("What did {t} close at on 2024-0{m}-1{m}?", ["get_previous_close"]),
    ("Post '{t} is up {m}%' to #desk-{m}.", ["post_message"]),
    ("Compare the P/E of {t} and {u}, then tell me the higher one.", ["get_quote", "get_quote", "run_python"]),
    ("How many employees does {n} have?", ["get_ticker_details"]),
    ("Search the web for \"{n} earnings {m}\" and give the top url.", ["search"]),
    ("Compute {m}7 * 4{m} with Python.", ["run_python"]),
]
TICKERS = [("AAPL", "Apple"), ("MSFT", "Microsoft"), ("NVDA", "Nvidia"), ("TSLA", "Tesla"), ("AMZN", "Amazon"),
           ("META", "Meta Platforms"), ("GOOGL", "Alphabet"), ("JPM", "JPMorgan Chase")]


def make(i, text, tools, extra=None):
    gt = {"task_id": f"t{i}", "complexity": "simple", "max_turns": 4, "success": {"must_call_tool": tools[0]},
          "tool_sequence": [{"step": k + 1, "server": "s", "tool": t, "params": {}} for k, t in enumerate(tools)],
          "limits": {"max_servers": 1, "max_tools": 2}, "answer": None}
    return SkyRLSample("test", [{"role": "system", "content": "sys"}, {"role": "user", "content": text}],
                       {"method": "rule", "ground_truth": gt}, extra or {})


def corpus():
    rng = random.Random(1)
    samples = []
    for template, tools in TEMPLATES:
        for (t, n), (u, _) in zip(TICKERS, TICKERS[1:] + TICKERS[:1]):
            samples.append(make(len(samples), template.format(t=t, n=n, u=u, m=rng.randint(1, 9)), tools))
    # Distinct tasks that look alike apart from the tools they need stay distinct groups.
    samples += [make(len(samples) + k, f"Give me a summary number {k} for the desk.", [f"tool_{k}"]) for k in range(12)]
    return samples


def test_parse_split():
    assert parse_split("train=0.8,val=0.1,test=0.1") == {"train": 0.8, "val": 0.1, "test": 0.1}
    for bad, fragment in [("train=0.8,val=0.1", "sum to 1"), ("train=x,val=1", "bad split part"),
                          ("train=0.5,train=0.5", "named twice"), ("train:1", "bad split part"), ("", "sum to 1")]:
        with pytest.raises(SplitError, match=fragment):
            parse_split(bad)


def test_dedup_key_masks_entities_numbers_and_keeps_tools():
    a = make(0, "What did AAPL close at on 2024-03-01? Then post it to #desk.", ["get_close", "post"])
    b = make(1, "What did MSFT close at on 2023-11-17? Then post it to #trading.", ["get_close", "post"])
    c = make(2, "What did MSFT close at on 2023-11-17? Then post it to #trading.", ["get_close"])
    assert dedup_key(a) == dedup_key(b) != dedup_key(c)
    assert dedup_key(a).startswith("what did <name> close at on <num>? then post it to <ref>.")
    assert dedup_key(make(3, "anything", ["x"], {"dedup_key": "tmpl|AAPL"})) == "tmpl|AAPL"


def test_split_is_seeded_proportional_and_keeps_near_duplicates_together():
    samples = corpus()
    fractions = {"train": 0.6, "val": 0.2, "test": 0.2}
    first = split_samples(samples, fractions, seed=7)
    again = split_samples(list(samples), fractions, seed=7)
    other = split_samples(samples, fractions, seed=8)
    ids = {name: [s.task_id for s in part] for name, part in first.items()}
    assert ids == {name: [s.task_id for s in part] for name, part in again.items()}
    assert ids != {name: [s.task_id for s in part] for name, part in other.items()}
    assert sorted(i for part in ids.values() for i in part) == sorted(s.task_id for s in samples)
    keys = {name: {dedup_key(s) for s in part} for name, part in first.items()}
    assert not (keys["train"] & keys["val"]) and not (keys["train"] & keys["test"]) and not (keys["val"] & keys["test"])
    assert len(keys["train"] | keys["val"] | keys["test"]) == len(TEMPLATES) + 12  # each template is one group
    sizes = {name: len(part) for name, part in first.items()}
    assert sizes["train"] > sizes["val"] > 0 and sizes["test"] > 0
    for part in first.values():  # input order is kept inside a split
        assert [s.task_id for s in part] == sorted((s.task_id for s in part), key=lambda t: int(t[1:]))


def test_split_files_are_byte_identical_for_the_same_seed(tmp_path):
    samples = corpus()
    result = Generated(samples, [{"task_id": s.task_id, "messages": []} for s in samples], [])
    fractions = parse_split("train=0.8,val=0.1,test=0.1")
    for run in ("a", "b"):
        written = write_outputs(result, tmp_path / run / "tasks.parquet", fractions=fractions, seed=3, fmt=None,
                                experts=None, dropped=None, with_dropped=False)
    names = sorted(p.name for p, _ in written)
    assert names == ["tasks_test.experts.jsonl", "tasks_test.parquet", "tasks_train.experts.jsonl",
                     "tasks_train.parquet", "tasks_val.experts.jsonl", "tasks_val.parquet"]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    train = read_samples(tmp_path / "a" / "tasks_train.parquet")
    assert [s.to_dict() for s in train] == [s.to_dict() for s in split_samples(samples, fractions, 3)["train"]]


def test_split_path_naming(tmp_path):
    assert split_path("data/processed/", "train") == split_path("data/processed", "train")
    assert str(split_path("data/processed/", "val", "parquet")) == "data/processed/val.parquet"
    assert str(split_path("out/tasks.jsonl", "test")) == "out/tasks_test.jsonl"
