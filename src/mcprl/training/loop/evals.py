"""The run's evals between its phases (held-out tasks, and the natural set when there is one), and its
summary: every eval, the paired tests between them, time and steps."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mcprl.data.sample import SkyRLSample
from mcprl.eval.metrics import CI_KEY
from mcprl.eval.run import NATURAL
from mcprl.training.evaluate import evaluate_in_run
from mcprl.training.run import Run, console


def run_evals(run: Run, name: str) -> None:
    """The eval `name` (base, sft, grpo) of the run's policy, its time kept off the training clock."""
    run.state.evals[name] = _eval(run, run.eval_tasks, name)
    if run.natural_tasks:
        run.state.evals[NATURAL + name] = _eval(run, run.natural_tasks, name, NATURAL)


def _eval(run: Run, tasks: list[SkyRLSample], name: str, prefix: str = "") -> dict[str, Any]:
    t0 = time.perf_counter()
    results = evaluate_in_run(run.policy, run.cfg, tasks, run.dir, name, prefix, console)
    seconds = time.perf_counter() - t0
    run.clock.paused += seconds
    run.callbacks.on_eval(prefix + name, results)
    overall = results["overall"]
    return {"success_rate": overall.get("success_rate"), "pass@1": overall.get("pass@1"),
            CI_KEY: overall.get(CI_KEY),
            "by_complexity": {k: v.get("success_rate") for k, v in results.get("by_complexity", {}).items()},
            "by_family": {k: v.get("success_rate") for k, v in results.get("by_family", {}).items()},
            "by_style": {k: v.get("success_rate") for k, v in results.get("by_style", {}).items()},
            **{key: overall.get(key) for key in ("tool_error_rate", "mean_turns", "false_completion_rate",
                                                 "failed_call_rate", "recovery_rate", "answer_after_error_rate")},
            "seconds": round(seconds, 1)}


def summarize(run: Run, final: Path | None) -> dict[str, Any]:
    """summary.json: every eval, the paired tests between them (generated, natural, no-demo families), time, steps,
    and PPO's critic where there is one."""
    state = run.state
    generated = {k: v for k, v in state.evals.items() if not k.startswith(NATURAL)}
    natural = {k.removeprefix(NATURAL): v for k, v in state.evals.items() if k.startswith(NATURAL)}
    generated_results = _load_evals(run.dir, generated)
    without_demos = _without_demos(generated_results, run.cfg.data.generate.no_demo_families)
    return {**{f"eval_{k}": v for k, v in generated.items()}, "paired": _paired(generated_results),
            **({"no_demo_families": without_demos} if without_demos else {}),
            **({"eval_natural": natural, "paired_natural": _paired(_load_evals(run.dir, natural, NATURAL))}
               if natural else {}),
            "train_seconds": round(run.clock.total, 1), "sft_steps": state.sft_step, "sft_seconds": state.sft_seconds,
            "grpo_steps": state.grpo_step, "final_checkpoint": str(final) if final else None,
            **({"critic": critic} if (critic := critic_summary(run.dir)) else {}),
            **({"grpo_probe": state.probe} if state.probe is not None else {}),
            **({"grpo_guard": state.guard} if state.guard is not None else {})}


def critic_summary(run_dir: Path) -> dict[str, Any]:
    """Did PPO's value model learn? Its loss and explained variance at the first and last step, the best
    explained variance, and values against returns at the end ({} without a critic)."""
    from mcprl.eval.run import load_metrics

    rows = load_metrics(run_dir / "metrics.jsonl", [])
    if "critic_value_loss" not in rows:
        return {}
    rows = rows[(rows["phase"] == "grpo") & rows["critic_value_loss"].notna()]
    if rows.empty:
        return {}
    first, last = rows.iloc[0], rows.iloc[-1]
    return {"steps": len(rows), "warmup_steps": (int(rows["critic_only"].fillna(0).sum()) if "critic_only" in rows else 0),
            "value_loss": {"first": float(first["critic_value_loss"]), "last": float(last["critic_value_loss"])},
            "explained_variance": {"first": float(first["critic_explained_variance"]),
                                   "last": float(last["critic_explained_variance"]),
                                   "max": float(rows["critic_explained_variance"].max())},
            "values_mean": float(last["critic_values_mean"]), "returns_mean": float(last["critic_returns_mean"]),
            "value_clip_frac": float(rows["critic_value_clip_frac"].mean())}


def _load_evals(run_dir: Path, evals: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    from mcprl.eval.results import load_results

    return {name: load_results(run_dir / f"eval_{prefix}{name}") for name in evals}


def _paired(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """base -> sft -> grpo on the same held-out tasks: which tasks changed, and whether that is chance."""
    from mcprl.eval.compare import paired_evals

    return {key: test.to_dict() for key, test in paired_evals(results).items()}


def _without_demos(results: dict[str, dict[str, Any]], families: list[str]) -> dict[str, Any]:
    """The held-out tasks of the families SFT had no demo of: pass@1 at each eval, and each eval against
    the one before it on those tasks alone (where GRPO must do what SFT could not)."""
    from mcprl.eval.stats import paired

    if not families or not results:
        return {}
    subsets = {name: {t: v for t, v in r["per_task"].items() if r.get("task_family", {}).get(t) in families}
               for name, r in results.items()}
    if not any(subsets.values()):
        return {}
    names = list(subsets)
    tests = {f"{b}_vs_{a}": paired(subsets[a], subsets[b], results[b].get("task_family"))
             for a, b in zip(names, names[1:])}
    return {"families": list(families), "n_tasks": max(len(v) for v in subsets.values()),
            "pass@1": {n: (sum(v.values()) / len(v) if v else None) for n, v in subsets.items()},
            "paired": {k: t.to_dict() for k, t in tests.items() if t is not None}}


def report(run_dir: Path) -> None:
    """The run's HTML report; one that cannot be built is a line, not a failed run."""
    from mcprl.eval.report import build_report

    try:
        build_report(run_dir, console=console)  # prints the report's path
    except Exception as e:  # noqa: BLE001 - the run's results are already on disk
        console.print(f"[yellow]report skipped:[/yellow] {e}")
