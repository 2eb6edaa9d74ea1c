"""`mcprl judge try`: score one turn of a dataset task with the LLM judge and print the breakdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from mcprl.cli.envs import DataOpt, load_sample, one_step

app = typer.Typer(no_args_is_help=True, help="Try the LLM judge.")
console = Console()


@app.command("try")
def try_judge(data: Optional[Path] = DataOpt, index: int = typer.Option(0, help="Row of the dataset."),
              action: Optional[str] = typer.Option(None, help="The model turn to score; default: the first expected call."),
              model: Optional[str] = typer.Option(None, help="Judge model (default: $OPENAI_MODEL or gpt-4o-mini)."),
              base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL).")) -> None:
    """Run one env step with `reward.fn: llm_judge`; a judge failure shows the heuristic fallback.

    Example: mcprl judge try --data data/processed/quickstart_train.jsonl --model gpt-4o-mini
    """
    judge = {k: v for k, v in {"model": model, "base_url": base_url}.items() if v}
    sample = load_sample(data, index)
    _, out, action = one_step(sample, {"reward_fn": "llm_judge", "judge": judge}, action)
    parts = out["metadata"].get("reward_components", {})
    table = Table(title=f"judge on {sample.task_id}: {action[:60]}")
    table.add_column("component")
    table.add_column("value", justify="right")
    for key, value in parts.items():
        table.add_row(key, json.dumps(value))
    console.print(table)
    console.print(f"reward: {float(out['reward']):.4f}  judge_failed: {bool(parts.get('judge_failed', False))}")
