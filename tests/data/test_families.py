"""The family generator: every family verified by execution, deterministic, many phrasings, no leak from
the held-out split (companies, phrasings, small talk) into training, and demos that recover."""

import asyncio
import json
import random
import re
import string
from pathlib import Path

import pytest

import mcprl.envs  # noqa: F401 - registers mcp_tool_env
from mcprl.data import families
from mcprl.data.families import FAMILIES, HELDOUT_PHRASINGS, LOOKUPS, generate, phrasing_split, phrasings, placeholders
from mcprl.data.execute import on_offline_servers
from mcprl.data.rules import build_world, execute_plan
from mcprl.data.sample import read_samples
from mcprl.envs.mcp_env import MCPToolEnv
from mcprl.episode import new_episode
from mcprl.protocol.prompt import tool_result_text
from mcprl.servers.offline.market import MarketData
from mcprl.servers.offline.companies import COMPANIES, SHORT_NAMES
from mcprl.tools.manager import ToolManager

NO_DEMO = ("net_income", "bigger_market_cap")
NATURAL = Path(__file__).parents[2] / "data/heldout/natural.jsonl"


@pytest.fixture(scope="module")
def train():
    return generate(150, seed=3, progress=False, recovery=0.5, no_demo_families=NO_DEMO)


@pytest.fixture(scope="module")
def heldout():
    return generate(100, seed=3, heldout=True, progress=False)


def test_every_family_has_a_bank_of_twelve_with_its_placeholders():
    banks = phrasings()
    assert set(banks) == set(FAMILIES)
    for family, bank in banks.items():
        assert len(bank) == 12 and len(set(bank)) == 12, family
        assert len({frozenset(placeholders(p)) for p in bank}) == 1, f"{family}: phrasings disagree on placeholders"


def test_same_seed_same_tasks_and_demos():
    make = lambda seed: generate(12, seed=seed, progress=False, recovery=0.5, no_demo_families=NO_DEMO)  # noqa: E731
    dump = lambda out: json.dumps([[s.to_dict() for s in out.samples], out.experts], sort_keys=True)  # noqa: E731
    first = dump(make(3))
    assert dump(make(3)) == first
    assert dump(make(4)) != first


def test_heldout_covers_every_family_twice(heldout):
    counts = {f: 0 for f in FAMILIES}
    for s in heldout.samples:
        counts[s.extra_info["family"]] += 1
    assert set(counts.values()) == {2}
    assert not heldout.experts or all(not s.extra_info["demo"] for s in heldout.samples)


def _fixed_parts(template: str) -> re.Pattern:
    """A held-out phrasing as a pattern: its own words, any values in the placeholders."""
    parts = [re.escape(lit) + (".+?" if field else "") for lit, field, _, _ in string.Formatter().parse(template)]
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


def test_no_heldout_phrasing_company_or_small_talk_in_training(train, heldout):
    world = build_world(heldout=True)
    held = set(world.tickers)
    held_names = {n.lower() for t in held for n in (world.names[t], *SHORT_NAMES[t])}
    patterns = {f: [_fixed_parts(p) for p in bank[-HELDOUT_PHRASINGS:]] for f, bank in phrasings().items()}
    for s in train.samples:
        question = s.prompt[1]["content"]
        assert s.extra_info["phrasing_split"] != "heldout"
        assert not set(s.extra_info["entities"]) & held
        assert not any(re.search(rf"\b{re.escape(n)}\b", question.lower()) for n in held_names), question
        assert not any(c.strip() in question for c in families.CONTEXTS["heldout"])
        assert not any(p.fullmatch(question) for p in patterns[s.extra_info["family"]]), question
    natural = {s.prompt[1]["content"].lower() for s in read_samples(NATURAL)}
    assert not natural & {s.prompt[1]["content"].lower() for s in train.samples}
    for s in heldout.samples:
        assert s.extra_info["phrasing_split"] == "heldout"
        assert set(s.extra_info["entities"]) <= held or s.extra_info["family"] == "calculate"


def test_demos_only_for_demo_families_and_phrasings(train):
    by_id = {s.task_id: s for s in train.samples}
    assert {e["task_id"] for e in train.experts} == {s.task_id for s in train.samples if s.extra_info["demo"]}
    for e in train.experts:
        info = by_id[e["task_id"]].extra_info
        assert info["phrasing_split"] == "demo" and info["family"] not in NO_DEMO
    rl_only = [s for s in train.samples if not s.extra_info["demo"]]
    assert {s.extra_info["family"] for s in rl_only} >= set(NO_DEMO)
    assert any(s.extra_info["phrasing_split"] == "rl" and s.extra_info["family"] not in NO_DEMO for s in rl_only)


def test_people_name_companies_and_the_demo_turns_names_into_tickers(train):
    styles = {s.extra_info["entity_style"] for s in train.samples}
    assert {"ticker", "name", "short"} <= styles
    named = [(s, e) for s in train.samples for e in train.experts
             if e["task_id"] == s.task_id and s.extra_info["entity_style"] in ("name", "short")]
    assert named
    for sample, expert in named:
        calls = [m for m in expert["messages"] if m["role"] == "assistant" and "<tool_call>" in m["content"]]
        responses = [m["content"] for m in expert["messages"][2:] if m["role"] == "user"]
        first = next(i for i, r in enumerate(responses) if "did you mean" in r)
        ticker = sample.extra_info["entities"][0]
        assert f"did you mean '{ticker}'" in responses[first]
        assert calls[first].get("weight", 1) == 1  # the policy: look the company up as the user wrote it
        fix = next(c for c in calls[first + 1:] if c.get("weight", 1) == 1)  # a masked slip may come between
        assert f'"{ticker}"' in fix["content"]


EMPTY = re.compile(r'"(bars|results|matches)":\[\]')


def test_slips_are_masked_and_fixed(train):
    kinds = set()
    for e in train.experts:
        msgs = e["messages"]
        for i, m in enumerate(msgs):
            if m.get("weight") == 0:
                response = msgs[i + 1]["content"]
                assert "error" in response or EMPTY.search(response), response
                assert msgs[i + 2]["role"] == "assistant" and msgs[i + 2].get("weight", 1) == 1
                kinds.add("empty" if EMPTY.search(response) else "date" if "YYYY-MM-DD" in response else
                          "type" if "is not of type" in response else
                          "missing" if "required" in response.lower() else "ticker")
    assert len(kinds) >= 3, kinds


@pytest.mark.parametrize("kind, family, shows", [
    ("wrong_type", "revenue", "is not of type 'integer'"),
    ("date_out_of_range", "close_on_date", "data covers 2022-01-03 to 2025-12-31"),
    ("empty_result", "volume_on_date", '"bars":[]'),
    ("empty_search", "top_result_url", '"results":[]'),
])
def test_each_kind_of_slip_shows_what_went_wrong(kind, family, shows):
    """The slipped call gets the server's own error, or an empty result, for the plan's call to fix."""
    async def slip(tm):
        world, days = build_world(False), MarketData().days
        for seed in range(20):
            task = families.draw(random.Random(seed), family, world, "train", frozenset(), days)
            episode = new_episode()
            calls, _, _ = await execute_plan(tm, task.draft, episode)
            found = await families.recovery_slip(tm, task, calls, world.tickers, random.Random(seed), episode, (kind,))
            if found:
                return calls[found.before], found
        raise AssertionError(f"no {kind} slip fits {family} in 20 draws")

    call, found = on_offline_servers(slip)
    assert found.weight == 0 and found.params != call["params"]
    assert shows in tool_result_text(found.result)


def test_unknown_slip_kind_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown or no slip_kinds.*known: misspell"):
        generate(2, seed=0, progress=False, slip_kinds=("misspell", "typo"))


def test_every_demo_solves_its_task_in_the_env(train):
    by_id = {s.task_id: s for s in train.samples}
    for expert in train.experts:
        sample = by_id[expert["task_id"]]
        env = MCPToolEnv(extras={"reward_spec": sample.reward_spec, "extra_info": sample.extra_info})
        env.init(sample.prompt)
        out = None
        for m in expert["messages"][2:]:
            if m["role"] == "assistant":
                out = env.step(m["content"])
        assert out is not None and out["done"] and env.success, expert["task_id"]


def test_lookup_paths_are_fields_the_tools_return():
    """Each lookup family names a field of its tool's real output, for a ticker of every sector."""
    async def check():
        async with ToolManager() as tm:
            for name, (server, tool, key, path, params) in LOOKUPS.items():
                for c in COMPANIES[::10]:
                    result = await tm.execute_tool(f"{server}.{tool}", {key: c.symbol, **params})
                    assert result["ok"], result
                    if name == "pe_ratio" and result["data"]["pe"] is None:
                        continue  # a loss maker: the generator draws again
                    families.path_value(result["data"], path)
    asyncio.run(check())


@pytest.mark.parametrize("split,index,size", [("demo", 0, 12), ("demo", 5, 12), ("rl", 6, 12), ("rl", 8, 12),
                                              ("heldout", 9, 12), ("heldout", 11, 12)])
def test_phrasing_split(split, index, size):
    assert phrasing_split(index, size) == split


def test_chain_weight_draws_each_family_of_several_calls_that_often_a_round():
    rounds = {w: families.family_cycle(random.Random(0), w) for w in (1, 3)}
    for weight, cycle in rounds.items():
        first = [next(cycle) for _ in range(len(FAMILIES) + (weight - 1) * sum(
            f.complexity != "simple" for f in FAMILIES.values()))]
        for name, family in FAMILIES.items():
            assert first.count(name) == (weight if family.complexity != "simple" else 1), (weight, name)


def test_chain_weight_is_for_training_only():
    with pytest.raises(ValueError, match="held-out split draws every family once"):
        generate(1, seed=0, progress=False, heldout=True, chain_weight=3)
    with pytest.raises(ValueError, match="chain_weight must be a whole number >= 1"):
        generate(1, seed=0, progress=False, chain_weight=0)


def test_unknown_no_demo_family_is_one_clear_error():
    with pytest.raises(ValueError, match="unknown families in no_demo_families: net_incom"):
        generate(1, seed=0, progress=False, no_demo_families=("net_incom",))
