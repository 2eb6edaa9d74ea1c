"""aggregated_results.json: metrics + error patterns + GRPO signal + alarms of one eval directory."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from mcprl.eval.errors import RunDirError
from mcprl.eval.metrics import aggregate
from mcprl.eval.patterns import pattern_summary
from mcprl.eval.render import print_results
from mcprl.eval.signal import analyze_signal, check_tool_collapse, signal_alarm
from mcprl.eval.trajectory import TrajectoryLike, as_trajectories, dump_trajectories, load_trajectories

TRAJECTORIES = "trajectories.jsonl"
AGGREGATED = "aggregated_results.json"


def build_results(
    trajectories: Iterable[TrajectoryLike],
    *,
    ks: Sequence[int] | None = None,
    reference: Mapping[str, Any] | None = None,
    name: str = "this checkpoint",
    reference_name: str = "the reference",
    max_input_tokens: int | None = None,
) -> dict[str, Any]:
    """Everything `aggregated_results.json` holds; `reference` (another eval's results) arms the
    tool-collapse check."""
    trajs = as_trajectories(trajectories)
    results = aggregate(trajs, ks, max_input_tokens=max_input_tokens)
    signal = analyze_signal(trajs)
    alarms = [a for a in (signal_alarm(signal),) if a is not None]
    if reference is not None:
        collapse = check_tool_collapse(results, reference, current_name=name, reference_name=reference_name)
        if collapse is not None:
            alarms.insert(0, collapse)
    results["patterns"] = pattern_summary(trajs, max_input_tokens=max_input_tokens)
    results["signal"] = signal.to_dict()
    results["alarms"] = [a.to_dict() for a in alarms]
    return results


def write_eval_outputs(
    out_dir: Path,
    trajectories: Iterable[TrajectoryLike],
    *,
    reference_dir: Path | None = None,
    ks: Sequence[int] | None = None,
    max_input_tokens: int | None = None,
    console: Console | None = None,
    write_trajectories: bool = True,
) -> dict[str, Any]:
    """Write trajectories.jsonl and aggregated_results.json into `out_dir`, print the summary,
    and return the results. `reference_dir` (e.g. the base model's eval) enables the collapse alarm."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    trajs = as_trajectories(trajectories)
    reference = load_results(reference_dir) if reference_dir is not None else None
    results = build_results(
        trajs,
        ks=ks,
        reference=reference,
        name=out_dir.name,
        reference_name=Path(reference_dir).name if reference_dir is not None else "the reference",
        max_input_tokens=max_input_tokens,
    )
    if write_trajectories:
        dump_trajectories(trajs, out_dir / TRAJECTORIES)
    (out_dir / AGGREGATED).write_text(json.dumps(results, indent=2) + "\n")
    print_results(results, console, title=out_dir.name)
    return results


def load_results(eval_dir: Path) -> dict[str, Any]:
    """An eval directory's aggregated results, recomputed from its trajectories when the file is
    missing or predates patterns/signal."""
    eval_dir = Path(eval_dir)
    path = eval_dir / AGGREGATED
    has_trajectories = (eval_dir / TRAJECTORIES).is_file()
    if path.is_file():
        try:
            results = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise RunDirError(f"{path} is not valid JSON ({err.msg}); rerun `mcprl eval summarize {eval_dir}`") from err
        complete = all(k in results for k in ("overall", "patterns", "signal", "per_task"))
        if complete or (not has_trajectories and "overall" in results):
            return results
    if not has_trajectories:
        raise RunDirError(f"{eval_dir} has neither {AGGREGATED} nor {TRAJECTORIES}; is it an eval directory?")
    return build_results(load_trajectories(eval_dir))
