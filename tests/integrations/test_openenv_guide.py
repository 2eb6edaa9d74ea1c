"""docs/openenv.md runs as written: its files, then its `mcprl` commands in order in one directory (a line
ending in `&` is a server, left running for the commands after it), then its openenv client block in
`.venv-openenv` when that exists. The port is a free one instead of 8000."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "openenv.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)
MCPRL = str(Path(sys.executable).with_name("mcprl"))
OPENENV_PY = ROOT / ".venv-openenv" / "bin" / "python"


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the server exited: {proc.stdout.read() if proc.stdout else ''}"
        try:
            if httpx.get(f"{url}/health", timeout=1).json().get("status") == "healthy":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{url} never became healthy")


@pytest.mark.slow
def test_the_openenv_guide_runs_as_written(tmp_path: Path) -> None:
    port = str(free_port())
    text = GUIDE.read_text().replace("8000", port)
    blocks = BLOCK.findall(text)
    commands = [line.strip() for lang, body in blocks if lang == "bash" for line in body.splitlines()
                if line.strip().startswith("mcprl ")]
    assert len(commands) >= 5, "the guide lost its commands"
    for lang, body in blocks:
        first, _, rest = body.partition("\n")
        if lang == "yaml" and first.startswith("# "):
            (tmp_path / first[2:].strip()).write_text(rest)
    servers = []
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
    try:
        for command in commands:
            background = command.endswith("&")
            argv = [MCPRL, *shlex.split(command.rstrip("&").strip())[1:]]
            if background:
                proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
                servers.append(proc)
                _wait_healthy(f"http://127.0.0.1:{port}", proc)
                continue
            done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        client = next(body for lang, body in blocks if lang == "python" and "GenericEnvClient" in body)
        if OPENENV_PY.exists():
            done = subprocess.run([str(OPENENV_PY), "-c", client], capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(timeout=30)
    metrics = [json.loads(line) for line in (tmp_path / "runs/openenv/metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if m.get("phase") == "grpo" and "update/policy_loss" in m]
    assert len(steps) == 2 and all(math.isfinite(m["update/policy_loss"]) for m in steps), metrics[-1]
    assert all("rollout/reward_mean" in m for m in steps)  # the served env's rewards
    evals = json.loads((tmp_path / "runs/openenv_eval/aggregated_results.json").read_text())
    assert evals["overall"]["n_trajectories"] == 2
