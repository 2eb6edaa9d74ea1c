"""The embedded trainer: base eval -> SFT warm start -> eval -> GRPO -> eval, on one machine.

Rollouts run through SkyRL's own generator over `mcp_tool_env`; advantages and policy losses come
from SkyRL's registries (see grpo.py). Everything a run produces lands in `run.output_dir`; each phase
lives in loop/ and takes the `Run` (run.py), and the experimental knobs attach to GRPO through hooks.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from mcprl.models.devices import long_lived_heap
from mcprl.training.checkpoint import save_checkpoint
from mcprl.training.config import TrainConfig
from mcprl.training.critic import Critic
from mcprl.training.loop.evals import report, run_evals, summarize
from mcprl.training.loop.grpo import run_grpo
from mcprl.training.loop.sft import run_sft
from mcprl.training.policy import build_policy
from mcprl.training.run import Run, console, open_run, start_run


def train(cfg: TrainConfig, *, resume: bool = False, resume_from: Path | None = None,
          sft_only: bool = False) -> dict[str, Any]:
    start = start_run(cfg, resume, resume_from)  # before the model loads: a broken checkpoint fails at once
    policy = build_policy(cfg)
    if cfg.model.dtype == "auto" and not policy.bf16 and next(policy.model.parameters()).device.type == "cpu":
        console.print("[yellow]fp32: this CPU has neither AMX nor AVX512-BF16, so steps take about twice as long as "
                      "in bf16 (docs/results.md gives the time per kind of machine)[/yellow]")
    run = open_run(start, policy)
    with long_lived_heap():
        summary = _phases(run, sft_only)
    report(run.dir)
    return summary


def _phases(run: Run, sft_only: bool) -> dict[str, Any]:
    """The stages in order; a resumed run skips those its state has done."""
    cfg, state, policy = run.cfg, run.state, run.policy
    summary: dict[str, Any] = {}
    try:
        # base eval
        if cfg.eval.before and "base" not in state.evals:
            run_evals(run, "base")
        # SFT warm start, its eval, and the phase boundary (step_grpo_0): the warm-started weights, no optimizer
        # state (GRPO starts its own). An --sft-only run ends here, so `--resume` or `--resume-from` runs its GRPO.
        if state.phase == "sft":
            run_sft(run)
            state.phase, state.sft_seconds = "grpo", round(run.clock.total, 1)
            if cfg.eval.after_sft:
                run_evals(run, "sft")
            run.checkpoint = phase_end(run)
        final = run.checkpoint
        # GRPO, its eval, and the final checkpoint (step_done)
        if state.phase == "grpo" and not sft_only:
            critic = run_grpo(run)
            state.phase = "done"
            if cfg.eval.after_grpo:
                run_evals(run, "grpo")
            final = phase_end(run, critic)
        summary = summarize(run, final)
    except BaseException:
        with contextlib.suppress(Exception):  # the run's own error is the one to report (a full disk fails both)
            run.callbacks.on_train_end(summary)
        raise
    else:
        run.callbacks.on_train_end(summary)
    finally:
        policy.engine.close()
    return summary


def phase_end(run: Run, critic: Critic | None = None) -> Path:
    """The checkpoint at the end of a phase: the weights (and the critic) and the training time so far, no optimizer."""
    run.state.elapsed_s = run.clock.total
    return save_checkpoint(run.dir, run.state, run.policy.model, run.policy.tokenizer, None, None,
                           {"engine": run.policy.engine.generator}, also=critic.save if critic is not None else None)
