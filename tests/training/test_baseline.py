"""`mcprl train --equal-time RUN_DIR`: SFT alone for the training time of an SFT + GRPO run, step-matched at the
run's SFT pace, on the run's own config, then compared with the run's last eval, paired. (The whole path on
the real model runs in test_trainer_smoke.py.)"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mcprl.training.baseline import compare_with_run, equal_time_config, read_plan
from mcprl.training.config import ConfigError, load_train_config, save_config
from tests.support.cli import train_app

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


def _eval_dir(path: Path, solved: dict[str, float]) -> None:
    path.mkdir(parents=True)
    families = {task: task.split("-")[0] for task in solved}
    (path / "aggregated_results.json").write_text(json.dumps(
        {"overall": {"pass@1": sum(solved.values()) / len(solved)}, "per_task": solved, "task_family": families}))


def finished_run(tmp_path, evals=None, **summary) -> Path:
    """A run directory as `make train` leaves it: config, summary, and the evals (name -> task -> pass)."""
    run = tmp_path / "runs" / "quick"
    run.mkdir(parents=True)
    save_config(load_train_config(QUICKSTART, ["run.seed=7", f"run.output_dir={run}"]), run / "config.yaml")
    defaults = {"train_seconds": 1051.0, "sft_steps": 160, "sft_seconds": 612.0, "grpo_steps": 4}
    (run / "summary.json").write_text(json.dumps({**defaults, **summary}))
    for name, solved in ({"grpo": {"a-1": 1.0}} if evals is None else evals).items():
        _eval_dir(run / f"eval_{name}", solved)
    return run


def test_the_plan_buys_the_runs_training_seconds_at_its_sft_pace(tmp_path):
    plan = read_plan(finished_run(tmp_path))
    assert plan.steps == 275  # 1051 s / (612 s / 160 steps), run P's arithmetic in docs/benchmarks.md
    assert "275 steps" in plan.describe() and "3.83 s a step" in plan.describe()


@pytest.mark.parametrize("summary, message", [
    ({"grpo_steps": 0}, "ran no GRPO step"),
    ({"sft_seconds": None}, "no SFT pace"),
])
def test_a_run_that_cannot_be_matched_says_why(tmp_path, summary, message):
    with pytest.raises(ConfigError, match=message):
        read_plan(finished_run(tmp_path, **summary))


def test_a_run_without_a_summary_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="summary.json not found"):
        read_plan(tmp_path)


def test_a_run_without_an_eval_is_refused_before_any_training(tmp_path):
    with pytest.raises(ConfigError, match="no eval_grpo/ or eval_sft/"):
        read_plan(finished_run(tmp_path, evals={}))


def test_the_baseline_takes_the_runs_config_with_its_own_steps_and_directory(tmp_path):
    run = finished_run(tmp_path)
    cfg = equal_time_config(read_plan(run), None, ["sft.lr=2e-4"])
    assert cfg.run.seed == 7  # the run's config, not the quickstart's
    assert (cfg.sft.max_steps, cfg.sft.max_seconds, cfg.sft.lr) == (275, None, 2e-4)
    assert not cfg.eval.before and cfg.eval.after_sft
    assert Path(cfg.run.output_dir) == run.parent / "quick_sft_only" and cfg.run.name == "quickstart_sft_only"
    for owned in ("sft.max_steps=10", "eval.after_sft=false"):  # the comparison reads the baseline's eval_sft
        with pytest.raises(ConfigError, match=f"drop {owned}"):
            equal_time_config(read_plan(run), None, [owned])


def test_the_comparison_lands_in_the_baselines_summary(tmp_path):
    run = finished_run(tmp_path, evals={"sft": {"a-1": 0.0, "b-1": 0.0, "c-1": 0.0},
                                        "grpo": {"a-1": 1.0, "b-1": 1.0, "c-1": 0.0}})
    baseline = tmp_path / "baseline"
    _eval_dir(baseline / "eval_sft", {"a-1": 1.0, "b-1": 0.0, "c-1": 1.0})
    (baseline / "summary.json").write_text(json.dumps({"sft_steps": 275}))
    record = compare_with_run(read_plan(run), baseline)
    assert record["run_eval"] == "eval_grpo"  # the run's last eval, not its warm start
    paired = record["baseline_vs_run"]
    assert (paired["tasks"], paired["better"], paired["worse"], paired["same"]) == (3, 1, 1, 1)
    written = json.loads((baseline / "summary.json").read_text())
    assert written["sft_steps"] == 275 and written["equal_time"]["sft_steps"] == 275



def test_dry_run_prints_the_plan_and_the_baselines_config(tmp_path):
    run = finished_run(tmp_path)
    result = CliRunner().invoke(train_app(), ["train", "--equal-time", str(run), "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = dict(line.split(":", 1) for line in result.output.splitlines()[1:] if ":" in line)
    assert result.output.startswith("SFT alone for 275 steps")
    assert lines["sft"].strip().startswith("on: 275 steps") and lines["algorithm"].strip() == "off (--sft-only)"
    assert lines["run"].strip() == f"quickstart_sft_only -> {run.parent / 'quick_sft_only'} (seed 7)"


@pytest.mark.parametrize("args, message", [
    (["--engine", "skyrl"], "embedded engine"),
    (["--resume-from", "x"], "drop --resume-from"),
])
def test_equal_time_refuses_what_it_cannot_honour(tmp_path, args, message):
    run = finished_run(tmp_path)
    result = CliRunner().invoke(train_app(), ["train", "--equal-time", str(run), *args])
    assert result.exit_code == 2 and message in result.output
