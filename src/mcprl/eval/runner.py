"""`mcprl eval --model M --data FILE --n K`: K samples per task through the same env and rollout
engine as training, written as trajectories.jsonl + aggregated_results.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer


def run_eval(model: str, data: Path, *, n: int = 1, temperature: float = 0.0, out: Path,
             config: Path | None = None, max_tasks: int | None = None, reference: Path | None = None) -> dict[str, Any]:
    from mcprl.data.sample import read_samples
    from mcprl.eval.results import write_eval_outputs
    from mcprl.training.config import TrainConfig, load_train_config
    from mcprl.training.policy import build_policy, load_policy_weights

    cfg = load_train_config(config) if config else TrainConfig()
    weights, tokenizer = load_policy_weights(model)
    policy = build_policy(cfg, model=weights, tokenizer=tokenizer)
    try:
        tasks = read_samples(data)[:max_tasks] if max_tasks else read_samples(data)
        result = policy.rollouts.run(tasks, n, policy.rollouts.sampling(temperature))
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
    max_tasks: Optional[int] = typer.Option(None, help="Evaluate at most this many tasks."),
    reference: Optional[Path] = typer.Option(None, help="Earlier eval dir: enables the tool-collapse alarm."),
) -> None:
    """Evaluate a model: `mcprl eval --model M --data FILE --n K --out DIR` (or a subcommand)."""
    if ctx.invoked_subcommand is not None:
        return
    if model is None or data is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(2)
    run_eval(model, data, n=n, temperature=temperature, out=out, config=config, max_tasks=max_tasks,
             reference=reference)
