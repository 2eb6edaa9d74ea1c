"""`mcprl eval run|compare|summarize` and `mcprl report` (wired into the main app by mcprl.cli.main)."""

from __future__ import annotations

import json
import webbrowser
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from mcprl.cli.errors import fail
from mcprl.eval.errors import EvalError

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Run and analyse evaluations.")


@contextmanager
def _one_line_errors() -> Iterator[None]:
    try:
        yield
    except EvalError as err:
        fail(err)


@app.command()
def compare(
    dir_a: Annotated[Path, typer.Argument(help="First eval directory (the baseline).")],
    dir_b: Annotated[Path, typer.Argument(help="Second eval directory; deltas are B - A.")],
) -> None:
    """Two evals side by side: every overall metric and the key ones per complexity.

    Example: mcprl eval compare runs/quickstart/eval_base runs/quickstart/eval_grpo
    """
    from mcprl.eval.compare import compare_dirs

    with _one_line_errors():
        compare_dirs(dir_a, dir_b)


@app.command()
def summarize(
    eval_dir: Annotated[Path, typer.Argument(help="Eval directory, or its trajectories.jsonl.")],
    reference: Annotated[
        Path | None, typer.Option(help="Eval directory to check tool-use collapse against (e.g. the base model's).")
    ] = None,
    k: Annotated[
        list[int] | None,
        typer.Option("--k", help="k for pass@k/pass^k (repeatable); default 1 and the samples per task."),
    ] = None,
    max_input_tokens: Annotated[
        int | None, typer.Option(help="Context size; a 'length' stop at it counts as context overflow.")
    ] = None,
) -> None:
    """Recompute aggregated_results.json (metrics, error patterns, GRPO signal, alarms) and print it.

    Example: mcprl eval summarize runs/quickstart/eval_grpo --reference runs/quickstart/eval_base
    """
    from mcprl.eval.results import write_eval_outputs
    from mcprl.eval.trajectory import load_trajectories

    out_dir = eval_dir.parent if eval_dir.is_file() else eval_dir
    with _one_line_errors():
        write_eval_outputs(
            out_dir,
            load_trajectories(eval_dir),
            reference_dir=reference,
            ks=k or None,
            max_input_tokens=max_input_tokens,
            write_trajectories=False,
        )


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="Training run directory (metrics.jsonl, eval_*/, summary.json).")],
    open_browser: Annotated[bool, typer.Option("--open", help="Open report.html in a browser afterwards.")] = False,
) -> None:
    """Charts, report.html and a one-screen summary of a run, written to RUN_DIR/report/.

    Example: mcprl report runs/quickstart --open
    """
    from mcprl.eval.report import build_report

    with _one_line_errors():
        paths = build_report(run_dir)
    if open_browser:
        webbrowser.open(paths.html.resolve().as_uri())


@app.command("run")
def run_command(
    model: str = typer.Option(..., "--model", "-m", help="Model name, local dir, or training checkpoint."),
    data: Path = typer.Option(..., "--data", "-d", help="Tasks (.jsonl/.json/.parquet)."),
    n: int = typer.Option(1, "--n", "-n", help="Samples per task (pass@k uses k = n)."),
    temperature: float = typer.Option(0.0, help="Sampling temperature (0: greedy)."),
    out: Path = typer.Option(Path("runs/eval"), "--out", help="Output directory."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Training YAML for rollout/env settings."),
    override: Optional[list[str]] = typer.Option(None, "--override", "-o", help="section.key=value on top of --config, "
                                                 "repeatable (as `mcprl train -o`), e.g. -o model.threads=1."),
    max_tasks: Optional[int] = typer.Option(None, help="Evaluate at most this many tasks."),
    reference: Optional[Path] = typer.Option(None, help="Earlier eval dir: enables the tool-collapse alarm."),
    faults: Optional[str] = typer.Option(None, "--faults", help="Tool calls that fail on purpose, as KIND=RATE pairs "
                                         "(= rollout.faults), e.g. timeout=0.1,server_error=0.05; kinds: timeout, "
                                         "rate_limit, server_error, malformed, truncated, crash; also seed=N, "
                                         "servers=a+b, tools=a+b."),
) -> None:
    """Run a model on tasks through the env, K samples each, into an eval dir.

    Example: mcprl eval run -m runs/quickstart/checkpoints/step_done -d data/processed/quickstart_test.jsonl --n 4 --out runs/eval_grpo
    """
    from mcprl.errors import ConfigError

    if not data.is_file():  # before torch and the trainer are imported (seconds on a small CPU)
        fail(ConfigError(f"--data {data} does not exist"))
    overrides = [*(override or []), *(_fault_overrides(faults) if faults else [])]
    from mcprl.training.evaluate import run_eval

    try:
        run_eval(model, data, n=n, temperature=temperature, out=out, config=config, overrides=overrides,
                 max_tasks=max_tasks, reference=reference)
    except ConfigError as err:
        fail(err)


def _fault_overrides(spec: str) -> list[str]:
    """`--faults timeout=0.1,...` as the `rollout.faults.*` overrides it stands for; a bad one is one line."""
    from dataclasses import asdict

    from mcprl.errors import ConfigError
    from mcprl.tools.faults import FaultConfig

    try:
        chosen = FaultConfig.parse(spec)
    except ValueError as err:
        fail(ConfigError(str(err)))
    default = asdict(FaultConfig())
    return [f"rollout.faults.{key}={json.dumps(value)}" for key, value in asdict(chosen).items() if value != default[key]]
