"""`mcprl train`: load and check the config, then hand it to an engine (`mcprl.training.engines`).

Mounted by mcprl.cli as `app.command("train")(train_command)`. Imports stay light: torch, the
trainer and SkyRL load only once a run (or a SkyRL dry run) needs them.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from mcprl.cli.errors import fail
from mcprl.errors import ConfigError
from mcprl.training.callbacks import TrainingHealthError
from mcprl.training.config import TrainConfig, load_train_config
from mcprl.training.engines import ENGINES, RunRequest, TrainEngine, get_engine

_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)


Engine = Enum("Engine", {name: name for name in ENGINES}, type=str)  # the choices of --engine


DEFAULT_CONFIG = Path("configs/quickstart.yaml")


def train_command(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Config YAML, or a directory with model.yaml, "
                                                "algo_grpo.yaml and rollout.yaml [default: configs/quickstart.yaml where it exists, "
                                                "else the built-in defaults (the same recipe); with --equal-time, "
                                                "the run's config.yaml].")] = None,
    engine: Annotated[Engine, typer.Option(help="embedded: mcprl's trainer (CPU or one GPU); "
                                           "skyrl: SkyRL's Ray/FSDP/vLLM trainer (GPUs); "
                                           "tinker: the Tinker API (hosted, a cluster's, or SkyRL's server on this machine).")] = Engine["embedded"],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would run and exit; loads no model.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the run's latest checkpoint.")] = False,
    resume_from: Annotated[Path | None, typer.Option(
        "--resume-from", help="Continue from this checkpoint directory, e.g. RUN_DIR/checkpoints/step_grpo_0 "
        "(the warm start) to rerun GRPO.")] = None,
    sft_only: Annotated[bool, typer.Option("--sft-only", help="Stop after SFT (embedded and tinker engines).")] = False,
    equal_time: Annotated[Path | None, typer.Option(
        "--equal-time", metavar="RUN_DIR", help="SFT alone for the training time RUN_DIR's SFT + GRPO took "
        "(step-matched at its SFT pace), into RUN_DIR_sft_only, then compared with RUN_DIR's last eval, "
        "paired (implies --sft-only).")] = None,
    override: Annotated[list[str] | None, typer.Option("--override", "-o", help="section.key=value, repeatable, "
                                                       "e.g. -o algo.lr=1e-5 -o rollout.max_turns=3.")] = None,
) -> None:
    """Train an agent with SFT + GRPO on MCP tools, as the config says.

    Example: mcprl train -c configs/quickstart.yaml -o algo.steps=16 -o run.output_dir=runs/longer
    """
    try:
        if equal_time is not None:
            if resume_from is not None:
                raise ConfigError("--equal-time trains SFT from the base model, as RUN_DIR did; drop --resume-from")
            _run_equal_time(equal_time, config, override or [], engine=engine, dry_run=dry_run, resume=resume)
            return
        cfg = load_train_config(config or (DEFAULT_CONFIG if DEFAULT_CONFIG.exists() else None), override or [])
        _run(get_engine(engine.value), cfg, RunRequest(resume, resume_from, sft_only), dry_run=dry_run)
    except ConfigError as err:
        fail(err)
    except TrainingHealthError as err:
        _err.print(f"[red]training stopped:[/red] {escape(str(err))}", soft_wrap=True)
        raise typer.Exit(1) from None


def _run(engine: TrainEngine, cfg: TrainConfig, request: RunRequest, *, dry_run: bool) -> None:
    if dry_run:
        _out.print(engine.plan(cfg, request), markup=False, soft_wrap=True)
    else:
        engine.run(cfg, request)


def _run_equal_time(run_dir: Path, config: Path | None, overrides: list[str], *, engine: Engine, dry_run: bool,
                    resume: bool) -> None:
    from mcprl.training import baseline

    if engine.value != "embedded":
        raise ConfigError("--equal-time: the SFT-only baseline runs on the embedded engine")
    plan = baseline.read_plan(run_dir)
    cfg = baseline.equal_time_config(plan, config, overrides)
    _out.print(plan.describe(), markup=False, soft_wrap=True)
    _run(get_engine("embedded"), cfg, RunRequest(resume=resume, sft_only=True), dry_run=dry_run)
    if not dry_run:
        record = baseline.compare_with_run(plan, Path(cfg.run.output_dir))
        if record["describe"]:
            _out.print(record["describe"], markup=False, soft_wrap=True)


if __name__ == "__main__":
    typer.run(train_command)
