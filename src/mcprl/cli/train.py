"""`mcprl train`: load and check the config, then run the embedded trainer or SkyRL's.

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
from mcprl.training.config import TrainConfig, describe, load_train_config, resolve_rollout_backend

_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)


class Engine(str, Enum):
    embedded = "embedded"
    skyrl = "skyrl"


DEFAULT_CONFIG = Path("configs/quickstart.yaml")


def train_command(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="Config YAML, or a directory with model.yaml, "
                                                "algo_grpo.yaml and rollout.yaml [default: configs/quickstart.yaml where it exists, "
                                                "else the built-in defaults (the same recipe); with --equal-time, "
                                                "the run's config.yaml].")] = None,
    engine: Annotated[Engine, typer.Option(help="embedded: mcprl's trainer (CPU or one GPU); "
                                           "skyrl: SkyRL's Ray/FSDP/vLLM trainer (GPUs).")] = Engine.embedded,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print what would run and exit; loads no model.")] = False,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the run's latest checkpoint.")] = False,
    resume_from: Annotated[Path | None, typer.Option(
        "--resume-from", help="Continue from this checkpoint directory, e.g. RUN_DIR/checkpoints/step_grpo_0 "
        "(the warm start) to rerun GRPO (embedded engine).")] = None,
    sft_only: Annotated[bool, typer.Option("--sft-only", help="Stop after SFT (embedded engine).")] = False,
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
        if engine is Engine.skyrl:
            if resume_from is not None:
                raise ConfigError("--resume-from: SkyRL's trainer resumes from its own latest checkpoint; use --resume")
            _run_skyrl(cfg, dry_run=dry_run, resume=resume, sft_only=sft_only)
        else:
            _run_embedded(cfg, dry_run=dry_run, resume=resume, resume_from=resume_from, sft_only=sft_only)
    except ConfigError as err:
        fail(err)
    except TrainingHealthError as err:
        _err.print(f"[red]training stopped:[/red] {escape(str(err))}", soft_wrap=True)
        raise typer.Exit(1) from None


def _run_embedded(cfg: TrainConfig, *, dry_run: bool, resume: bool, resume_from: Path | None, sft_only: bool) -> None:
    if dry_run:
        _out.print(describe(cfg, "embedded", sft_only), markup=False, soft_wrap=True)
        return
    resolve_rollout_backend(cfg)  # an impossible backend fails before any model loads
    if resume_from is not None:
        from mcprl.training.checkpoint import checked_checkpoint

        resume_from = checked_checkpoint(resume_from)
    from mcprl.training.trainer import train

    train(cfg, resume=resume, resume_from=resume_from, sft_only=sft_only)


def _run_equal_time(run_dir: Path, config: Path | None, overrides: list[str], *, engine: Engine, dry_run: bool,
                    resume: bool) -> None:
    from mcprl.training import baseline

    if engine is Engine.skyrl:
        raise ConfigError("--equal-time: the SFT-only baseline runs on the embedded engine")
    plan = baseline.read_plan(run_dir)
    cfg = baseline.equal_time_config(plan, config, overrides)
    _out.print(plan.describe(), markup=False, soft_wrap=True)
    _run_embedded(cfg, dry_run=dry_run, resume=resume, resume_from=None, sft_only=True)
    if not dry_run:
        record = baseline.compare_with_run(plan, Path(cfg.run.output_dir))
        if record["describe"]:
            _out.print(record["describe"], markup=False, soft_wrap=True)


def _run_skyrl(cfg: TrainConfig, *, dry_run: bool, resume: bool, sft_only: bool) -> None:
    if sft_only:
        raise ConfigError("--sft-only: SkyRL's trainer runs GRPO only; use --engine embedded for SFT")
    from mcprl.training import skyrl_launcher

    if dry_run:
        plan = skyrl_launcher.dry_run(cfg, resume=resume)
        _out.print(describe(cfg, "skyrl"), plan, sep="\n", markup=False, soft_wrap=True)
        return
    skyrl_launcher.launch(cfg, resume=resume)


if __name__ == "__main__":
    typer.run(train_command)
