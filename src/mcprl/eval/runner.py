"""`mcprl eval --model M --data FILE --n K`: K samples per task through the same env and rollout
engine as training, written as trajectories.jsonl + aggregated_results.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape


def run_eval(model: str, data: Path, *, n: int = 1, temperature: float = 0.0, out: Path,
             config: Path | None = None, overrides: list[str] | None = None, max_tasks: int | None = None,
             reference: Path | None = None) -> dict[str, Any]:
    from mcprl.data.sample import read_samples
    from mcprl.eval.results import write_eval_outputs
    from mcprl.training.config import load_train_config
    from mcprl.training.policy import build_policy, load_policy_weights
    from mcprl.training.rollout import episode_progress

    cfg = load_train_config(config, overrides or [])
    weights, tokenizer = load_policy_weights(model)
    policy = build_policy(cfg, model=weights, tokenizer=tokenizer)
    try:
        tasks = read_samples(data)[:max_tasks] if max_tasks else read_samples(data)
        with episode_progress(f"eval {data.name}", len(tasks) * n) as on_episode:
            result = policy.rollouts.run(tasks, n, policy.rollouts.sampling(temperature), on_episode)
    finally:
        policy.engine.close()
    return write_eval_outputs(out, result.trajectories, reference_dir=reference, ks=sorted({1, n}),
                              max_input_tokens=cfg.rollout.max_input_length)


def eval_callback(
    ctx: typer.Context,
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model name, local dir, or training checkpoint."),
    data: Optional[Path] = typer.Option(None, "--data", "-d", help="Tasks (.jsonl/.json/.parquet)."),
    n: int = typer.Option(1, "--n", "-n", help="Samples per task (pass@k uses k = n)."),
    temperature: float = typer.Option(0.0, help="Sampling temperature (0: greedy)."),
    out: Path = typer.Option(Path("runs/eval"), "--out", "-o", help="Output directory."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Training YAML for rollout/env settings."),
    override: Optional[list[str]] = typer.Option(None, "--override", help="section.key=value on top of --config, "
                                                 "repeatable (as `mcprl train -o`), e.g. --override model.threads=1."),
    max_tasks: Optional[int] = typer.Option(None, help="Evaluate at most this many tasks."),
    reference: Optional[Path] = typer.Option(None, help="Earlier eval dir: enables the tool-collapse alarm."),
) -> None:
    """Evaluate a model: `mcprl eval --model M --data FILE --n K --out DIR` (or a subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    if model is None or data is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(2)
    from mcprl.training.config import ConfigError

    try:
        run_eval(model, data, n=n, temperature=temperature, out=out, config=config, overrides=override,
                 max_tasks=max_tasks, reference=reference)
    except ConfigError as err:
        Console(stderr=True).print(f"[red]error:[/red] {escape(str(err))}", soft_wrap=True)
        raise typer.Exit(2) from None
