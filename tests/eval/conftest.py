"""A synthetic finished run directory for the report tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcprl.eval.results import write_eval_outputs
from tests.eval.scripted import always_correct, metrics_rows, mixed, rollout


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A finished run: SFT + GRPO metrics, config, summary, and base/grpo evals."""
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.dumps(r) for r in metrics_rows()]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n" + '{"step": 99, "phase": "gr')  # torn last line
    (run / "config.yaml").write_text(
        "model: HuggingFaceTB/SmolLM2-135M-Instruct\ngrpo:\n  group_size: 4\n  lr: 1.0e-6\n"
    )
    base = write_eval_outputs(run / "eval_base", rollout(mixed, seed=1))
    grpo = write_eval_outputs(run / "eval_grpo", rollout(always_correct), reference_dir=run / "eval_base")
    (run / "summary.json").write_text(json.dumps({"eval_base": base, "eval_grpo": grpo, "train_seconds": 330.0}))
    return run
