"""The hand-written held-out set: its file is what the YAML builds to, every task is solvable in the env
by its own plan, and the set is what it claims to be (held-out companies, many families, no tool names)."""

import json
import re
from datetime import date
from pathlib import Path

import jsonschema
import pytest

import mcprl.envs  # noqa: F401 - registers mcp_tool_env
from mcprl.data.natural import STYLES, NaturalTaskError, answer_of, build_async, execute, load_spec
from mcprl.data.rules import build_world
from mcprl.data.sample import read_samples, sample_schema
from mcprl.envs.mcp_env import MCPToolEnv
from mcprl.protocol.parsing import format_answer, format_tool_call
from mcprl.tools.config import default_servers_config
from mcprl.tools.sync import shared_tool_manager

ROOT = Path(__file__).parents[2]
SPEC = ROOT / "data/heldout/natural.yaml"
BUILT = ROOT / "data/heldout/natural.jsonl"
FAMILIES = 30
MIN_TASKS = 48


@pytest.fixture(scope="module")
def live():
    """The process's offline servers (the generators' and envs'): each start costs seconds."""
    return shared_tool_manager(default_servers_config())


@pytest.fixture(scope="module")
def spec():
    return load_spec(SPEC)


@pytest.fixture(scope="module")
def fresh(spec, live):
    return live.run(build_async(spec, live.manager), timeout=300)


@pytest.fixture(scope="module")
def results(spec, live):
    """Each task's executed results (the `data` of every step), by id."""
    async def run_all():
        return {task["id"]: await execute(task, live.manager) for task in spec}

    return live.run(run_all(), timeout=300)


def dump(samples):
    return [json.dumps(s.to_dict(), sort_keys=True, ensure_ascii=False) for s in samples]


def test_the_file_on_disk_is_a_fresh_build_of_the_yaml(fresh):
    """Answers are re-derived by executing every plan; run `mcprl data natural` after editing the YAML."""
    on_disk = read_samples(BUILT)
    assert [s.task_id for s in on_disk] == [s.task_id for s in fresh]
    assert dump(on_disk) == dump(fresh)


def test_rows_are_schema_valid_and_shaped_like_rule_tasks(fresh):
    validator = jsonschema.Draft202012Validator(sample_schema())
    for s in fresh:
        assert not list(validator.iter_errors(s.to_dict())), s.task_id
        gt, plan = s.ground_truth, s.ground_truth["tool_sequence"]
        assert [m["role"] for m in s.prompt] == ["system", "user"]
        assert "reset_workspace" not in s.prompt[0]["content"] and "reset_workspace" not in gt["allowed_tools"]
        assert s.data_source == "natural/" + "+".join(sorted({st["server"] for st in plan}))
        assert gt["max_turns"] == len(plan) + 3 and gt["limits"]["max_tools"] == len(plan) + 2
        assert gt["success"]["must_call_tool"] == plan[0]["tool"]
        assert s.extra_info["split"] == "natural" and s.extra_info["template"] == s.extra_info["family"]
    assert {s.ground_truth["complexity"] for s in fresh} == {"simple", "medium", "complex"}


def test_every_task_replays_solvably_in_the_env(fresh):
    for sample in fresh:
        gt = sample.ground_truth
        env = MCPToolEnv({}, {"reward_spec": sample.reward_spec, "extra_info": sample.extra_info})
        env.init(sample.prompt)
        actions = [format_tool_call(st["tool"], st["params"], "hermes") for st in gt["tool_sequence"]]
        if gt["answer"] is not None:
            actions.append(format_answer(gt["answer"]))
        outs = [env.step(a) for a in actions]
        meta = [o["metadata"] for o in outs]
        assert all(m["tool_ok"] for m in meta[:len(gt["tool_sequence"])]), (sample.task_id, meta)
        assert not any(o["done"] for o in outs[:-1]), (sample.task_id, meta)
        assert outs[-1]["done"] and env.success, (sample.task_id, meta)
        assert sum(o["reward"] for o in outs) >= 1.0


def test_a_wrong_answer_does_not_solve_a_task(fresh):
    """The answers discriminate: the plan's calls and then a wrong answer end unsolved."""
    for sample in fresh:
        gt = sample.ground_truth
        if gt["answer"] is None:
            continue
        wrong = "ZZZZ" if isinstance(gt["answer"], str) else float(gt["answer"]) * 3 + 7
        env = MCPToolEnv({}, {"reward_spec": sample.reward_spec, "extra_info": sample.extra_info})
        env.init(sample.prompt)
        for st in gt["tool_sequence"]:
            env.step(format_tool_call(st["tool"], st["params"], "hermes"))
        out = env.step(format_answer(wrong))
        assert out["done"] and not env.success, sample.task_id


def test_the_set_is_large_varied_and_about_held_out_companies_only(spec, fresh):
    held = set(build_world(heldout=True).tickers)
    assert held == {"AMZN", "COST", "GE", "IBM", "LIN", "MRK", "NVDA", "PLD", "UNH", "XOM"}
    assert len(fresh) >= MIN_TASKS
    assert len({s.extra_info["family"] for s in fresh}) >= FAMILIES
    questions = [s.prompt[1]["content"] for s in fresh]
    assert len(set(questions)) == len(questions)
    assert len({q.strip().lower() for q in questions}) == len(questions)
    for s in fresh:
        ents = s.extra_info["entities"]
        assert set(ents) <= held, s.task_id
        assert s.extra_info["style"] in STYLES
        assert ents or s.extra_info["style"] == "none", s.task_id  # a company named is an entity
        for st in s.ground_truth["tool_sequence"]:
            for key in ("ticker", "symbol"):
                assert st["params"].get(key, "AMZN") in held, s.task_id
    styles = {s.extra_info["style"] for s in fresh}
    assert styles == set(STYLES)


def test_styles_name_the_company_as_they_say(fresh):
    names = build_world(heldout=True).names
    for s in fresh:
        question, style, ents = s.prompt[1]["content"], s.extra_info["style"], s.extra_info["entities"]
        if style == "name":
            assert any(names[t] in question for t in ents), s.task_id
        elif style == "ticker":
            assert any(re.search(rf"\b{t}\b", question, re.IGNORECASE) for t in ents), s.task_id


def test_no_question_names_a_tool_or_a_data_server(live, fresh):
    """"python" and "slack" are ordinary words here ("post in Slack"); the vendors' names are not."""
    tm = live.manager
    words = {t.tool for t in tm.tools()} | {"polygon", "fmp", "tavily", "run_python"}
    pattern = re.compile(rf"\b({'|'.join(map(re.escape, sorted(words)))})\b", re.IGNORECASE)
    for s in fresh:
        assert not pattern.search(s.prompt[1]["content"]), (s.task_id, s.prompt[1]["content"])


def test_code_numbers_come_from_the_question_or_earlier_results(spec, results):
    """A plan's arithmetic uses the numbers the question gives or its earlier calls returned, not typed ones."""
    for task in spec:
        seen = {str(task["question"])}
        for step, data in zip(task["plan"], results[task["id"]]):
            if step["tool"] == "run_python":
                for number in re.findall(r"\d+(?:\.\d+)?", step["params"]["code"]):
                    assert number in ("2", "100") or any(_same(number, v) for v in _leaves(seen)), \
                        (task["id"], number)
            seen.add(json.dumps(data))


def test_chained_arguments_are_the_earlier_results(spec, results):
    """The url read is the top result found; the day looked up is the alert's day."""
    for task in spec:
        plan, data = task["plan"], results[task["id"]]
        for i, step in enumerate(plan[1:], start=1):
            if step["tool"] == "extract" and plan[i - 1]["tool"] == "search":
                assert step["params"]["urls"] == [data[i - 1]["results"][0]["url"]], task["id"]
            if step["tool"] == "get_daily_bars" and plan[i - 1]["tool"] == "search_messages":
                alert = data[i - 1]["matches"][0]["text"]
                assert f" on {step['params']['start_date']} " in alert and \
                    step["params"]["start_date"] == step["params"]["end_date"], task["id"]


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")


def test_a_day_asked_for_is_the_day_looked_up(spec):
    """However the question writes the date ("June 9th 2025", "8/14/2025", "2025-04-07"), it is the plan's."""
    for task in spec:
        if not task["family"].endswith("_on_date"):
            continue
        day = date.fromisoformat(task["plan"][0]["params"]["start_date"])
        month = _MONTHS[day.month - 1]
        forms = [re.escape(day.isoformat()), rf"{day.month}/{day.day}/{day.year}",
                 rf"({month}|{month[:3]})\.? {day.day}(st|nd|rd|th)?,? {day.year}",
                 rf"{day.day}(st|nd|rd|th)? of {month},? {day.year}"]
        assert any(re.search(rf"\b{f}\b", task["question"], re.IGNORECASE) for f in forms), task["id"]
        assert day.weekday() < 5, task["id"]


def test_a_broken_task_fails_the_build_naming_it(spec, live):
    tm = live.manager
    task = next(t for t in spec if t["answer"] and t["answer"].get("path") == "price")
    typo = {**task, "id": "natural-typo", "answer": {"step": 1, "path": "prise"}}
    with pytest.raises(NaturalTaskError, match="natural-typo.*prise"):
        live.run(build_async([typo], tm), timeout=60)
    weekend = {**task, "id": "natural-weekend",
               "plan": [{"server": "polygon", "tool": "get_daily_bars",
                         "params": {"ticker": "NVDA", "start_date": "2025-03-08", "end_date": "2025-03-08"}}],
               "answer": {"step": 1, "path": "bars.0.close"}}
    with pytest.raises(NaturalTaskError, match="natural-weekend"):  # no bar on a Saturday
        live.run(build_async([weekend], tm), timeout=60)
    unknown = {**task, "id": "natural-unknown",
               "plan": [{"server": "polygon", "tool": "get_last_quote", "params": {"ticker": "NVIDIA"}}]}
    with pytest.raises(NaturalTaskError, match="natural-unknown.*unknown ticker"):
        live.run(build_async([unknown], tm), timeout=60)
    with pytest.raises(NaturalTaskError, match="highest"):
        answer_of({"id": "natural-cmp", "plan": [{"params": {"symbol": "GE"}}, {"params": {"symbol": "LIN"}}],
                   "answer": {"value": "LIN", "highest": [{"step": 1, "path": "pe"}, {"step": 2, "path": "pe"}]}},
                  [{"pe": 53.3}, {"pe": 47.9}])


def _leaves(texts):
    for text in texts:
        yield from re.findall(r"-?\d+(?:\.\d+)?", text)


def _same(a: str, b: str) -> bool:
    return float(a) == abs(float(b))
