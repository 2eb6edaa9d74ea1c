"""OpenEnv conformance against the real openenv 0.10.0, run from `.venv-openenv` (`make openenv-venv`): its
validator, its GenericEnvClient and MCPToolClient on `mcprl openenv serve`, and a real openenv MCPEnvironment
trained on with `env_class: openenv_env` and evaluated with `mcprl eval`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mcprl.data.rules import generate
from mcprl.data.sample import write_samples
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-openenv" / "bin"
SUPPORT = ROOT / "tests" / "support" / "openenv_real"
MCPRL = str(Path(sys.executable).with_name("mcprl"))
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (VENV / "python").exists(), reason="needs .venv-openenv (make openenv-venv)")]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited: {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} never answered /health")


def start(argv: list[str], url: str, **kwargs) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, **kwargs)
    try:
        wait_healthy(url, proc)
    except BaseException:
        proc.kill()
        raise
    return proc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def tasks():
    return generate(6, seed=21, progress=False)


@pytest.fixture(scope="module")
def served(tasks, tmp_path_factory):
    path = write_samples(tasks.samples, tmp_path_factory.mktemp("served") / "tasks.jsonl")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start([MCPRL, "openenv", "serve", "--data", str(path), "--port", str(port), "--max-sessions", "16"], url)
    yield url
    stop(proc)


def venv(*args: str, timeout: int = 300) -> str:
    done = subprocess.run([str(VENV / "python"), *args], capture_output=True, text=True, timeout=timeout, env=ENV)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_openenv_validate_passes(served):
    done = subprocess.run([str(VENV / "openenv"), "validate", "--url", served], capture_output=True, text=True,
                          timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "Verdict: PASS" in out, out
    for criterion in ("openapi_version_available", "health_endpoint", "metadata_endpoint", "schema_endpoint",
                      "mcp_endpoint", "mode_endpoint_consistency"):
        assert f"PASS  {criterion}" in out, out


def test_openenvs_clients_solve_and_fail_real_tasks(served, tasks, tmp_path):
    """GenericEnvClient (WebSocket steps) and MCPToolClient (calls over HTTP /mcp, the answer as a step): a
    verified answer solves the task, a wrong one does not."""
    plan = [{"task_id": s.task_id, "calls": [[t["tool"], t["params"]] for t in s.ground_truth["tool_sequence"]],
             "answer": str(s.ground_truth["answer"]), "wrong_answer": "-12345"}
            for s in tasks.samples if s.ground_truth["answer"] is not None][:3]
    assert plan
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    results = json.loads(venv(str(SUPPORT / "clients.py"), served, "episodes", str(tmp_path / "plan.json")))
    for task in plan:
        r = results[task["task_id"]]
        solved, failed = r["generic_solved"], r["generic_failed"]
        assert solved["done"] and solved["rewards"][-1] > 0 and solved["state"]["solved"]
        assert solved["state"]["reward_so_far"] == pytest.approx(sum(solved["rewards"]))
        assert failed["done"] and failed["rewards"][-1] < 0 and not failed["state"]["solved"]
        mcp_solved, mcp_failed = r["mcp_solved"], r["mcp_failed"]
        assert "answer" in mcp_solved["tools"] and all(mcp_solved["results_ok"])
        assert mcp_solved["done"] and mcp_solved["final_reward"] > 0
        assert mcp_solved["step_count"] == len(task["calls"]) + 1  # the /mcp calls were steps of the same session
        assert mcp_failed["done"] and mcp_failed["final_reward"] < 0


def test_sixteen_concurrent_sessions_keep_their_slack_posts_apart(served, tasks):
    task_id = tasks.samples[0].task_id  # posts to #trading-desk
    seen = json.loads(venv(str(SUPPORT / "clients.py"), served, "slack", "16", task_id))["seen"]
    assert seen == [[f"note {i}"] for i in range(16)]


def calc_rows(n: int) -> list[dict]:
    return [{"data_source": "calc", "env_class": "openenv_env",
             "prompt": [{"role": "user", "content": f"Add {i} and {i + 3} with the add tool, then submit the sum."}],
             "reward_spec": {"method": "env", "ground_truth": {"task_id": f"calc-{i}", "max_turns": 3}},
             "extra_info": {"reset_kwargs": {"a": i, "b": i + 3}}} for i in range(n)]


def test_mcprl_trains_and_evaluates_on_a_real_openenv_mcp_environment(tmp_path):
    """Two GRPO steps of the default model on openenv's own MCPEnvironment (served from its venv), then
    `mcprl eval` on the same rows: finite losses, and every episode reset on (and scored by) that server."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    resets = tmp_path / "resets.log"
    rows = write_samples(calc_rows(4), tmp_path / "calc.jsonl")
    server = start([str(VENV / "python"), str(SUPPORT / "calc_env.py"), str(port), str(resets)], url)
    try:
        overrides = ["sft.enabled=false", "algo.steps=2", "algo.prompts_per_step=2", "algo.group_size=2",
                     "algo.micro_batch_size=4", "algo.dynamic_sampling.max_sample_batches=1", "rollout.max_turns=3",
                     "rollout.max_new_tokens=48",
                     f"rollout.openenv.url={url}", f"data.train={rows}", f"data.eval={rows}", "eval.before=false",
                     "eval.after_sft=false", "eval.after_grpo=false", "eval.natural=null",
                     "logging.wandb.enabled=false", "logging.console_every=0", f"run.output_dir={tmp_path / 'run'}"]
        argv = [MCPRL, "train", "-c", str(ROOT / "configs" / "quickstart.yaml")]
        for o in overrides:
            argv += ["-o", o]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1200, env=ENV, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
        steps = [m for m in metrics if m.get("phase") == "grpo" and "update/policy_loss" in m]
        assert len(steps) == 2 and all(math.isfinite(m["update/policy_loss"]) for m in steps)
        assert all(math.isfinite(m["rollout/reward_mean"]) for m in steps)
        assert len(resets.read_text().splitlines()) == 2 * 2 * 2  # steps x prompts x group: one session each
        out = tmp_path / "eval"
        done = subprocess.run([MCPRL, "eval", "run", "-m", "smollm2-135m", "-d", str(rows), "--out", str(out),
                               "-o", f"rollout.openenv.url={url}", "-o", "rollout.max_turns=3",
                               "-o", "rollout.max_new_tokens=48"],
                              capture_output=True, text=True, timeout=900, env=ENV, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        overall = json.loads((out / "aggregated_results.json").read_text())["overall"]
        assert overall["n_trajectories"] == 4
        trajectories = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
        assert all(t["turns"] for t in trajectories)
        assert len(resets.read_text().splitlines()) == 8 + 4
    finally:
        stop(server)
