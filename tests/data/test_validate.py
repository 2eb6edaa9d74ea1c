import json

import pytest
from typer.testing import CliRunner

from mcprl.cli.data import app
from mcprl.protocol.prompt import system_prompt
from mcprl.data.validate import Inventory, load_tokenizer, validate_file


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("smollm2-135m")  # the default model's real tokenizer and chat template


def good_row(tools, i, *, tool="add", params=None, user="What is 2 plus 3?"):
    fx = [t for t in tools if t.server == "fx"]
    gt = {"task_id": f"t{i}", "complexity": "simple", "max_turns": 3,
          "success": {"must_call_tool": tool, "must_call_tools": [tool], "answer_required": True},
          "tool_sequence": [{"step": 1, "server": "fx", "tool": tool, "params": params or {"a": 2, "b": 3}}],
          "limits": {"max_servers": 1, "max_tools": 2}, "answer": 5, "allowed_tools": [t.name for t in fx]}
    return {"data_source": "test/fx", "env_class": "mcp_tool_env",
            "prompt": [{"role": "system", "content": system_prompt(fx)}, {"role": "user", "content": user}],
            "reward_spec": {"method": "rule", "ground_truth": gt}, "extra_info": {}}


def broken_file(path, tools):
    missing = good_row(tools, 2)
    del missing["data_source"], missing["reward_spec"]["ground_truth"]["answer"]
    assistant = good_row(tools, 3)
    assistant["prompt"][1]["role"] = "assistant"
    lines = [
        json.dumps(good_row(tools, 1)),
        json.dumps(missing),
        json.dumps(assistant),
        json.dumps(good_row(tools, 4, tool="subtract")),
        json.dumps(good_row(tools, 5, params={"a": "two", "b": 3})),
        json.dumps(good_row(tools, 6, user="Please add these numbers: " + "seven " * 2500)),
        '{"data_source": "x", "prompt": [',
        json.dumps(good_row(tools, 1)),  # same task id as row 1
        json.dumps(good_row(tools, 9, tool="lookup", params={"key": "k"})),
        json.dumps(good_row(tools, 10)),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_each_problem_is_reported_with_its_row_and_field(live, tokenizer, tmp_path):
    tools = live.tm.tools()
    path = broken_file(tmp_path / "mixed.jsonl", tools)
    report = validate_file(path, max_tokens=2048, tokenizer=tokenizer,
                           inventory=Inventory(tools, ["fx", "time"]))
    found = {(p.row, p.field) for p in report.problems}
    assert (2, "data_source") in found and (2, "reward_spec.ground_truth.answer") in found
    assert (3, "prompt[1].role") in found
    assert (4, "reward_spec.ground_truth.tool_sequence[0].tool") in found
    assert (5, "reward_spec.ground_truth.tool_sequence[0].params.a") in found
    assert (6, "prompt") in found
    assert (7, "(row)") in found
    assert (8, "reward_spec.ground_truth.task_id") in found
    messages = {p.row: str(p) for p in report.problems}
    assert "exposes no tool 'subtract'" in messages[4] and "add" in messages[4]
    assert "over the budget of 2048" in messages[6] and "invalid JSON" in messages[7]
    assert "is also the id of row 1" in messages[8]
    assert report.bad_rows == {2, 3, 4, 5, 6, 7, 8} and report.valid_rows == 3 and not report.ok
    assert len(report.stats.prompt_tokens) == 9 and max(report.stats.prompt_tokens) > 2048
    assert report.stats.tools_used["fx.lookup"] == 1


def test_validate_cli_passes_good_files_and_fails_broken_ones(live, tokenizer, tmp_path, servers_yaml):
    tools = live.tm.tools()
    runner = CliRunner()
    broken = broken_file(tmp_path / "mixed.jsonl", tools)
    result = runner.invoke(app, ["validate", "--in", str(broken), "--servers-config", str(servers_yaml)])
    assert result.exit_code == 1, result.output
    assert "3 valid rows, 7 rows with problems" in result.output
    assert "row 4: reward_spec.ground_truth.tool_sequence[0].tool" in result.output

    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(good_row(tools, i)) + "\n" for i in range(3)))
    result = runner.invoke(app, ["validate", "--in", str(good), "--no-servers", "--max-tokens", "1024"])
    assert result.exit_code == 0, result.output
    assert "Validation passed" in result.output and "tool checks skipped" in result.output

    result = runner.invoke(app, ["validate", "--in", str(good), "--no-servers", "--max-tokens", "50"])
    assert result.exit_code == 1 and "over the budget of 50" in result.output


def test_stats_and_convert_round_trip(live, tmp_path):
    tools = live.tm.tools()
    runner = CliRunner()
    src = tmp_path / "a.jsonl"
    from mcprl.data.sample import write_samples

    write_samples([good_row(tools, i, user=f"What is {i} plus 3?") for i in range(4)], src)
    for ext in ("parquet", "json"):
        mid, back = tmp_path / f"b.{ext}", tmp_path / f"c_{ext}.jsonl"
        assert runner.invoke(app, ["convert", "--in", str(src), "--out", str(mid)]).exit_code == 0
        assert runner.invoke(app, ["convert", "--in", str(mid), "--out", str(back)]).exit_code == 0
        assert back.read_bytes() == src.read_bytes()
    result = runner.invoke(app, ["stats", "--in", str(tmp_path / "b.parquet")])
    assert result.exit_code == 0 and "4 rows" in result.output and "test/fx" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text(src.read_text() + "{oops\n")
    result = runner.invoke(app, ["convert", "--in", str(bad), "--out", str(tmp_path / "x.parquet")])
    assert result.exit_code == 1 and "row 5" in result.output and not (tmp_path / "x.parquet").exists()


def test_a_row_that_is_not_utf8_is_one_problem_with_its_row_number(live, tmp_path):
    """One bad byte used to fail the whole file with a byte offset (issue 49, finding 7); the other rows
    are still checked."""
    from mcprl.data.sample import write_samples

    src = write_samples([good_row(live.tm.tools(), i, user=f"What is {i} plus 3?") for i in range(2)],
                        tmp_path / "a.jsonl")
    src.write_bytes(src.read_bytes() + b'{"data_source": "x\xff"}\n')
    result = CliRunner().invoke(app, ["validate", "--in", str(src), "--no-servers"])
    assert result.exit_code == 1 and "row 3" in result.output and "not UTF-8: byte 0xff" in result.output
    assert "2 valid rows" in result.output
