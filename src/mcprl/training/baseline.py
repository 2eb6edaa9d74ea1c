"""SFT alone for the training time an SFT + GRPO run took: the baseline that says whether GRPO's share of
the time beat more SFT (`mcprl train --sft-only --equal-time RUN_DIR`).

Step-matched, not clock-matched: the baseline gets as many SFT steps as the run's training seconds buy at
the run's own SFT pace, so a machine that is faster or slower in the next hour does not change what is
compared. With the run's config and seed its first steps are the run's warm start, step for step; it
then goes on with the same demos for the time GRPO had.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcprl.errors import ConfigError
from mcprl.training.callbacks import SUMMARY_FILE, write_summary
from mcprl.training.config import TrainConfig, load_train_config

# Keys the baseline sets itself: overriding them would undo the equal time or the comparison.
OWN_KEYS = ("sft.max_steps", "sft.max_seconds", "sft.enabled", "eval.after_sft")


@dataclass(frozen=True)
class EqualTime:
    run_dir: Path
    train_seconds: float  # the run's SFT + GRPO, evals excluded
    sft_steps: int  # the run's
    sft_seconds: float  # the run's
    run_eval: Path  # the run's last eval (eval_grpo/), which the baseline's eval_sft/ is compared with

    @property
    def steps(self) -> int:
        """SFT steps the run's training seconds buy at its SFT pace."""
        return max(1, round(self.train_seconds * self.sft_steps / self.sft_seconds))

    def describe(self) -> str:
        return (f"SFT alone for {self.steps} steps: {self.run_dir}'s {self.train_seconds:.0f} training seconds "
                f"(SFT + GRPO) at its SFT pace of {self.sft_seconds / self.sft_steps:.2f} s a step "
                f"({self.sft_steps} steps in {self.sft_seconds:.0f} s)")

    def overrides(self) -> list[str]:
        return [f"sft.max_steps={self.steps}", "sft.max_seconds=null", "sft.enabled=true", "eval.before=false",
                "eval.after_sft=true", f"run.output_dir={self.run_dir.parent / (self.run_dir.name + '_sft_only')}"]


def read_plan(run_dir: Path) -> EqualTime:
    """The equal-time plan from a finished run's summary.json; a clear error, before any training, for what
    cannot be matched or compared."""
    run_dir = Path(run_dir)
    path = run_dir / SUMMARY_FILE
    if not path.is_file():
        raise ConfigError(f"--equal-time: {path} not found; the run must have finished (make train writes it)")
    summary = json.loads(path.read_text(encoding="utf-8"))
    if not summary.get("grpo_steps"):
        raise ConfigError(f"--equal-time: {run_dir} ran no GRPO step, so there is no GRPO time to give to SFT")
    if not summary.get("sft_steps") or not summary.get("sft_seconds"):
        raise ConfigError(f"--equal-time: {path} has no SFT pace (sft_steps, sft_seconds; runs before this option "
                          "lacked sft_seconds): give the baseline its steps with -o sft.max_steps=N instead")
    evals = [run_dir / f"eval_{name}" for name in ("grpo", "sft") if (run_dir / f"eval_{name}").is_dir()]
    if not evals:
        raise ConfigError(f"--equal-time: {run_dir} has no eval_grpo/ or eval_sft/ to compare with")
    return EqualTime(run_dir, float(summary["train_seconds"]), int(summary["sft_steps"]),
                     float(summary["sft_seconds"]), evals[0])


def equal_time_config(plan: EqualTime, config: Path | None, overrides: list[str]) -> TrainConfig:
    """The run's own config (or `config`), with the plan's steps, output directory and run name (W&B's
    `<name>_sft_only`); the user's overrides come last, except for the keys the plan owns."""
    owned = [o for o in overrides if o.split("=", 1)[0].strip() in OWN_KEYS]
    if owned:
        raise ConfigError(f"--equal-time sets {', '.join(OWN_KEYS)} itself; drop {', '.join(owned)}")
    path = config or plan.run_dir / "config.yaml"
    name = load_train_config(path).run.name
    return load_train_config(path, [*plan.overrides(), f"run.name={name}_sft_only", *overrides])


def compare_with_run(plan: EqualTime, baseline_dir: Path) -> dict[str, Any]:
    """The run's last eval against the baseline's, paired over the tasks both ran, added to the baseline's
    summary.json as `equal_time`."""
    from mcprl.eval.compare import paired_results
    from mcprl.eval.results import load_results

    baseline_dir = Path(baseline_dir)
    test = paired_results(load_results(plan.run_eval), load_results(baseline_dir / "eval_sft"))
    record = {"run": str(plan.run_dir), "run_eval": plan.run_eval.name, "run_train_seconds": plan.train_seconds,
              "run_sft_seconds_per_step": round(plan.sft_seconds / plan.sft_steps, 3), "sft_steps": plan.steps,
              "baseline_vs_run": test.to_dict() if test is not None else None,
              "describe": test.describe(f"{plan.run_dir.name} ({plan.run_eval.name})", "SFT alone") if test else None}
    path = baseline_dir / SUMMARY_FILE
    summary = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    write_summary(baseline_dir, {**summary, "equal_time": record})
    return record
