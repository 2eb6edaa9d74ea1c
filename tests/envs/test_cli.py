"""`mcprl env check` and `mcprl judge try` on a real dataset row."""

import re

from typer.testing import CliRunner

from mcprl.cli.main import app
from mcprl.data.rules import generate
from mcprl.data.sample import write_samples
from tests.rewards.test_judge import API_KEY, Stub

runner = CliRunner()


def dataset(tmp_path):
    return write_samples(generate(2, seed=3, progress=False).samples, tmp_path / "tasks.jsonl")


def test_env_check_prints_float_reward_and_bool_done(tmp_path):
    result = runner.invoke(app, ["env", "check", "--data", str(dataset(tmp_path))])
    assert result.exit_code == 0, result.output
    reward = re.search(r"^reward: (-?\d+\.\d+)$", result.output, re.M)
    assert reward and float(reward.group(1)) > 0
    assert re.search(r"^done: (True|False)$", result.output, re.M)
    assert "metadata keys:" in result.output and "task_id" in result.output


def test_judge_try_scores_one_turn_with_a_local_endpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    stub = Stub()
    try:
        result = runner.invoke(app, ["judge", "try", "--data", str(dataset(tmp_path)), "--base-url", stub.url,
                                     "--model", "judge-stub"])
    finally:
        stub.close()
    assert result.exit_code == 0, result.output
    assert "tool_correct" in result.output and "judge_failed: False" in result.output
    assert stub.bodies and API_KEY not in "".join(stub.bodies)


def test_judge_try_falls_back_when_the_endpoint_is_down(tmp_path):
    result = runner.invoke(app, ["judge", "try", "--data", str(dataset(tmp_path)), "--base-url",
                                 "http://127.0.0.1:9/v1"])
    assert result.exit_code == 0, result.output
    assert "judge_failed: True" in result.output
