"""`mcprl eval` through the real generator, env and servers: scripted policies for exact numbers,
and the real default model on a handful of tasks."""

import json

import pytest
from typer.testing import CliRunner

from mcprl.cli.main import app
from mcprl.data.rules import generate
from mcprl.data.sample import write_samples
from mcprl.eval.results import write_eval_outputs
from mcprl.training.config import env_config, load_train_config
from mcprl.training.rollout import Rollouts
from tests.support.scripted import ScriptedClient, expert_policy


@pytest.fixture(scope="module")
def tasks():
    return generate(4, seed=21, progress=False)


def scripted_eval(tokenizer, tasks, policy, out, reference=None, n=2, on_episode=None, overrides=()):
    cfg = load_train_config("configs/quickstart.yaml", overrides)
    rollouts = Rollouts(ScriptedClient(tokenizer, policy), tokenizer, env_config=env_config(cfg), max_turns=6,
                        max_input_length=4096, max_new_tokens=128)
    result = rollouts.run(tasks.samples, n, rollouts.sampling(0.0), on_episode)
    return result, write_eval_outputs(out, result.trajectories, reference_dir=reference, ks=[1, n])


def test_always_correct_policy_gets_pass_at_k_one(tmp_path, tokenizer, tasks):
    ended = []
    result, agg = scripted_eval(tokenizer, tasks, expert_policy(tasks.experts), tmp_path / "expert",
                                on_episode=lambda: ended.append(len(ended)))
    assert len(ended) == 8  # the progress callback: once per episode, 4 tasks x 2
    overall = agg["overall"]
    assert overall["pass@1"] == 1.0 and overall["pass@2"] == 1.0 and overall["pass^2"] == 1.0
    assert overall["success_rate"] == 1.0 and overall["tool_error_rate"] == 0.0
    rows = [json.loads(x) for x in (tmp_path / "expert" / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(r["turns"] and r["score"] for r in rows)
    assert {"input_prompt", "output_response", "stop_reason", "env_extras", "prompt_tokens"} <= set(rows[0])


def test_injected_faults_reach_trajectories_and_metrics_and_repeat(tmp_path, tokenizer, tasks):
    """rollout.faults through the real env and servers: the faults are in the trajectories and the metrics,
    a rerun meets the same ones, and the expert (who never retries) solves less under them."""
    faults = ["rollout.faults.timeout=0.3", "rollout.faults.server_error=0.2"]
    runs = [scripted_eval(tokenizer, tasks, expert_policy(tasks.experts), tmp_path / f"faults{i}", overrides=faults)
            for i in range(2)]
    _, clean = scripted_eval(tokenizer, tasks, expert_policy(tasks.experts), tmp_path / "clean")
    marks = []
    for i in range(2):
        rows = [json.loads(x) for x in (tmp_path / f"faults{i}" / "trajectories.jsonl").read_text().splitlines()]
        marks.append([[t["result"].get("injected_fault") for t in r["turns"] if t["kind"] == "tool_call"] for r in rows])
    calls = [m for traj in marks[0] for m in traj]
    injected = [m for m in calls if m]
    assert injected and set(injected) <= {"timeout", "server_error"} and marks[0] == marks[1]
    overall = runs[0][1]["overall"]
    assert overall["injected_fault_rate"] == pytest.approx(len(injected) / len(calls))
    assert clean["overall"]["injected_fault_rate"] == 0.0
    assert overall["success_rate"] < clean["overall"]["success_rate"] == 1.0
    assert overall["failed_call_rate"] > 0 and overall["recovery_rate"] is not None


def test_a_bad_faults_flag_is_one_line_before_loading_a_model(tmp_path, tasks):
    data = write_samples(tasks.samples, tmp_path / "tasks.jsonl")
    result = CliRunner().invoke(app, ["eval", "run", "-m", "no-such-model", "-d", str(data), "--faults", "timeout=0.7,crash=0.5"])
    assert result.exit_code == 2 and "add up to 1.2" in result.output and "Traceback" not in result.output


def test_policy_that_never_calls_tools_is_labelled_and_trips_the_alarm(tmp_path, tokenizer, tasks):
    scripted_eval(tokenizer, tasks, expert_policy(tasks.experts), tmp_path / "expert")
    _, agg = scripted_eval(tokenizer, tasks, lambda question, turn: "<answer>I am not sure.</answer>",
                           tmp_path / "lazy", reference=tmp_path / "expert")
    rows = [json.loads(x) for x in (tmp_path / "lazy" / "trajectories.jsonl").read_text().splitlines()]
    assert agg["overall"]["success_rate"] == 0.0
    results = json.loads((tmp_path / "lazy" / "aggregated_results.json").read_text())
    assert results["patterns"]["counts"]["no_tool_used"] == len(rows)
    assert any(a["kind"] == "tool_collapse" for a in results["alarms"])


def test_mcprl_eval_with_the_real_default_model(tmp_path, tasks):
    data = write_samples(tasks.samples, tmp_path / "tasks.jsonl")
    cfg = tmp_path / "small.yaml"
    cfg.write_text("rollout: {max_new_tokens: 24, max_turns: 3}\nmodel: {threads: 2}\n")
    result = CliRunner().invoke(app, ["eval", "run", "--model", "smollm2-135m", "--data", str(data), "--n", "2",
                                      "--max-tasks", "2", "--config", str(cfg), "--out", str(tmp_path / "out"),
                                      "--override", "rollout.max_turns=1", "--override", "model.threads=1"])
    assert result.exit_code == 0, result.output
    agg = json.loads((tmp_path / "out" / "aggregated_results.json").read_text())
    assert agg["overall"]["n_trajectories"] == 4 and agg["overall"]["n_tasks"] == 2
    assert "pass@2" in agg["overall"] and "signal" in agg
    rows = [json.loads(x) for x in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    assert all(r["num_turns"] == 1 for r in rows)  # the override beat the config's 3 turns


def test_mcprl_eval_rejects_a_bad_override_before_loading_a_model(tmp_path, tasks):
    data = write_samples(tasks.samples, tmp_path / "tasks.jsonl")
    result = CliRunner().invoke(app, ["eval", "run", "--model", "no-such-model", "--data", str(data),
                                      "--override", "rollout.max_turns=many"])
    assert result.exit_code == 2
    assert "rollout.max_turns" in result.output and "Traceback" not in result.output


def test_bad_data_fails_in_one_line_before_any_model_loads(tmp_path, monkeypatch):
    """A missing file, or a row that is not a sample, used to surface after the model had loaded (issue 49,
    finding 7); a model that cannot load proves none was asked for."""
    from mcprl.training import evaluate

    monkeypatch.setattr(evaluate, "load_policy_weights", lambda *a, **k: pytest.fail("the model was loaded"))
    (tmp_path / "bad.jsonl").write_text('{"x": 1}\n')
    for data, fragment in ((tmp_path / "missing.jsonl", "does not exist"), (tmp_path / "bad.jsonl", "row 1: no 'data_source'")):
        result = CliRunner().invoke(app, ["eval", "run", "-m", "smollm2-135m", "-d", str(data), "--out", str(tmp_path / "e")])
        assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output, result.output
