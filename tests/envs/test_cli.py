"""`mcprl env check` and `mcprl judge try` on a real dataset row."""

import re
import subprocess
import sys

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


def test_env_check_failures_are_one_line(tmp_path):
    """A missing file, a row that is not a sample, an index past the end, a missing servers config: one
    `error:` line each, exit 2, no traceback (issue 49, finding 7)."""
    (tmp_path / "bad.jsonl").write_text('{"bad": 1}\n')
    good = str(dataset(tmp_path))
    for args, fragment in [
        (["--data", str(tmp_path / "missing.jsonl")], "No such file or directory"),
        (["--data", str(tmp_path / "bad.jsonl")], "row 1: no 'data_source'"),
        (["--data", good, "--index", "9"], "--index 9 is out of range"),
    ]:
        result = runner.invoke(app, ["env", "check", *args])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert lines[-1].startswith("error:") and fragment in result.output, result.output
    # raised deeper down (the env loads the servers config): the `mcprl` entry point prints it
    done = subprocess.run([sys.executable, "-m", "mcprl.cli", "env", "check", "--data", good, "-c",
                           str(tmp_path / "none.yaml")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().startswith("error: servers config not found"), done.stderr
