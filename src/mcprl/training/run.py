"""A training run, which every phase takes as its one argument: config, data, state, directory, policy,
callbacks and clock. Every engine's run starts here (seeds, the state it continues, data made when missing)."""

from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from rich.console import Console

from mcprl.data import families, rules
from mcprl.data.sample import SkyRLSample, read_samples, write_samples
from mcprl.training.callbacks import CallbackList, build_callbacks, trim_metrics
from mcprl.training.checkpoint import TrainState, latest_checkpoint, read_state, retire_latest
from mcprl.training.config import TrainConfig
from mcprl.training.policy import Policy

console = Console()  # the run's lines and progress bars, every phase's and engine's

GENERATORS: dict[str, Callable[[Any], tuple[rules.RuleOutput, rules.RuleOutput]]] = {
    "rules": lambda g: rules.generate_splits(g.n_train, g.n_eval, g.seed, recovery=g.recovery),
    "families": lambda g: families.generate_splits(g.n_train, g.n_eval, g.seed, recovery=g.recovery,
                                                   no_demo_families=tuple(g.no_demo_families), slip_kinds=tuple(g.slip_kinds),
                                                   chain_weight=g.chain_weight),
}  # the generators that need no inputs, so a run can make its own data


class Clock:
    """Training seconds (evals excluded), carried across resumes."""

    def __init__(self, elapsed: float = 0.0) -> None:
        self.before, self.start = elapsed, time.perf_counter()
        self.paused = 0.0

    @property
    def total(self) -> float:
        return self.before + time.perf_counter() - self.start - self.paused

    def over(self, limit: float | None) -> bool:
        return limit is not None and self.total >= limit


@dataclass
class RunStart:
    """What every engine's run begins with, before any model loads: its directory, data, and the checkpoint
    it continues (after SFT, the warm start GRPO continues)."""

    cfg: TrainConfig
    dir: Path
    train_tasks: list[SkyRLSample]
    eval_tasks: list[SkyRLSample]
    experts_path: Path
    natural_tasks: list[SkyRLSample]
    checkpoint: Path | None
    state: TrainState


@dataclass
class Run(RunStart):
    """A started run: the start with the policy, the callbacks and the training clock."""

    policy: Policy
    callbacks: CallbackList
    clock: Clock


def start_run(cfg: TrainConfig, resume: bool, resume_from: Path | None) -> RunStart:
    """Seeds, the state to continue from, and data (generated when missing): the state is read before the
    data is made and any model loads, so that a broken checkpoint fails at once."""
    run_dir = Path(cfg.run.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    random.seed(cfg.run.seed)
    np.random.seed(cfg.run.seed)
    torch.manual_seed(cfg.run.seed)
    checkpoint = resume_from or (latest_checkpoint(run_dir) if resume else None)
    state = read_state(checkpoint) if checkpoint is not None else TrainState(phase="sft" if cfg.sft.enabled else "grpo")
    train_tasks, eval_tasks, experts_path = prepare_data(cfg)
    return RunStart(cfg, run_dir, train_tasks, eval_tasks, experts_path, natural_eval_tasks(cfg), checkpoint, state)


def open_run(start: RunStart, policy: Policy, where: str = "") -> Run:
    """The run's callbacks started and its clock carried on; a resumed run says so and brings the evals of
    the run its checkpoint came from."""
    own = start.checkpoint is not None and in_run(start.checkpoint, start.dir)
    if start.checkpoint is not None:
        console.print(f"resuming from {start.checkpoint} ({start.state.phase} step {start.state.tag}){where}")
        adopt_evals(start.checkpoint, start.dir, start.state)
    # The record holds one run: a resume keeps the rows up to its checkpoint, any other start none.
    moved = trim_metrics(start.dir, *((start.state.sft_step, start.state.grpo_step) if own else (0, 0)))
    if moved:
        why = "logged after that checkpoint (those steps run again)" if own else "of an earlier run in this directory"
        console.print(f"metrics.jsonl: {moved} row(s) {why} moved to metrics.superseded.jsonl")
    if not own and retire_latest(start.dir):
        console.print("checkpoints/latest of an earlier run in this directory removed (its checkpoints stay until "
                      "this run's replace them; --resume-from one of them to continue it)")
    callbacks = build_callbacks(start.cfg, start.dir, resume=own)
    callbacks.on_train_start(start.cfg, start.dir)
    return Run(**vars(start), policy=policy, callbacks=callbacks, clock=Clock(start.state.elapsed_s))


def adopt_evals(checkpoint: Path, run_dir: Path, state: TrainState) -> None:
    """A checkpoint from another run brings that run's evals (eval_base/, eval_sft/) into this one, so the
    report and the paired tests still compare base -> sft -> grpo on the same tasks."""
    if in_run(checkpoint, run_dir):
        return
    source = Path(checkpoint).resolve().parent.parent
    for name in list(state.evals):
        src, dst = source / f"eval_{name}", run_dir / f"eval_{name}"
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
        else:
            console.print(f"[yellow]{src} is gone: eval_{name} left out of this run's summary[/yellow]")
            del state.evals[name]


def in_run(checkpoint: Path, run_dir: Path) -> bool:
    """Whether the checkpoint is one of this run directory's own (RUN_DIR/checkpoints/step_*)."""
    return Path(checkpoint).resolve().parent.parent == Path(run_dir).resolve()


def prepare_data(cfg: TrainConfig) -> tuple[list[SkyRLSample], list[SkyRLSample], Path]:
    """Train tasks, held-out eval tasks (unseen entities) and expert demos; generated when missing, and
    generated again when `data.generate` changed since mcprl generated them (a stamp beside data.train
    records it; files without a stamp are the user's and are never replaced)."""
    train_path, eval_path, experts_path = Path(cfg.data.train), Path(cfg.data.eval), Path(cfg.data.experts_path())
    g = cfg.data.generate
    stamp, wanted = train_path.with_name(f"{train_path.stem}.generate.json"), json.dumps(asdict(g), sort_keys=True)
    needs_experts = cfg.sft.enabled or cfg.experimental.expert_guidance
    missing = not (train_path.exists() and eval_path.exists() and (experts_path.exists() or not needs_experts))
    stale = stamp.exists() and stamp.read_text() != wanted
    if cfg.data.regenerate or missing or stale:
        if g.method not in GENERATORS:
            state = ("are missing" if missing else "were generated with other data.generate settings" if stale
                     else "are to be regenerated (data.regenerate)")
            raise ValueError(f"data files {state} and data.generate.method={g.method} needs inputs; "
                             f"run `mcprl data generate {g.method} ...` first")
        if stale and not missing:
            console.print(f"data.generate changed since {train_path} was generated: generating it again")
        with console.status(f"generating {g.n_train} training and {g.n_eval} held-out tasks"):
            train, held = GENERATORS[g.method](g)
        write_samples(train.samples, train_path)
        write_samples(held.samples, eval_path)
        experts_path.parent.mkdir(parents=True, exist_ok=True)
        experts_path.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in train.experts))
        stamp.write_text(wanted)
    return read_samples(train_path), read_samples(eval_path), experts_path


def natural_eval_tasks(cfg: TrainConfig) -> list[SkyRLSample]:
    """The tasks written in people's words (eval.natural), or none, said once, where the file is missing."""
    tasks = read_samples(Path(cfg.eval.natural)) if cfg.eval.natural and Path(cfg.eval.natural).is_file() else []
    if cfg.eval.natural and not tasks:
        console.print(f"[yellow]eval.natural: {cfg.eval.natural} not found here; the natural held-out eval is skipped[/yellow]")
    return tasks
