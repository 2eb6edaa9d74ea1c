"""The full quickstart learning run (`make test-all`; ~20 min on 2 bf16 cores, 34 in fp32): the default
model goes from no usable tool calls to solving held-out multi-turn tasks, chains included."""

import json
import math
from pathlib import Path

import pytest

from mcprl.metric_names import short
from mcprl.training import trainer
from mcprl.training.config import load_train_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]  # 34 min on an fp32 CPU; the suite default is 600 s


def test_quickstart_learns_held_out_multi_turn_tasks(tmp_path: Path) -> None:
    run = tmp_path / "quickstart"
    summary = trainer.train(load_train_config("configs/quickstart.yaml", [
        f"run.output_dir={run}", "logging.wandb.enabled=false", "logging.console_every=0"]))

    assert summary["eval_base"]["success_rate"] <= 0.05
    assert summary["eval_sft"]["success_rate"] >= 0.4
    final = summary["eval_grpo"]
    assert final["success_rate"] >= 0.5
    assert final["by_complexity"]["medium"] > 0 and final["by_complexity"]["complex"] > 0  # chains, not lookups
    assert json.loads((run / "summary.json").read_text())["train_seconds"] == summary["train_seconds"]
    grpo = [short(json.loads(line)) for line in (run / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["phase"] == "grpo"]
    assert len(grpo) == summary["grpo_steps"] and all(math.isfinite(r["policy_loss"]) for r in grpo)
    assert any(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in (run / "report").glob("*.png"))
