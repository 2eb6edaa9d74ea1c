"""examples/grpo_loop.py, the minimal GRPO loop of the docs, runs one real step: SmolLM2 on the real
offline servers through SkyRL's generator, SkyRL's advantages and loss, an optimizer step, a weight sync."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo_loop.py"


@pytest.mark.slow  # 90 s on the 2-core machine: make test-all
def test_the_minimal_grpo_loop_runs_a_step(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("grpo_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    log = module.main(1, None, 2, 2, ["rollout.max_new_tokens=48", "rollout.max_turns=2", "model.threads=1",
                                      f"data.train={tmp_path}/train.jsonl", f"data.eval={tmp_path}/test.jsonl",
                                      "data.generate.n_train=40", "data.generate.n_eval=4"])
    assert [row["step"] for row in log] == [1]
    row = log[0]
    assert row["tokens"] > 0 and 0.0 <= row["solved"] <= 1.0
    assert -1.0 <= row["reward_mean"] <= 1.0 and math.isfinite(row["loss"])
    assert len(EXAMPLE.read_text().splitlines()) <= 120
