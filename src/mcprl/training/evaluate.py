"""Evaluation episodes: a policy runs held-out tasks through the same env and rollout engine as training,
and the trajectories become an eval directory (trajectories.jsonl + aggregated_results.json) that
`mcprl.eval` analyses. The trainer's evals and `mcprl eval run` both run here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from mcprl.data.sample import SkyRLSample, read_samples
from mcprl.errors import ConfigError
from mcprl.eval.results import write_eval_outputs
from mcprl.training.config import TrainConfig, load_train_config
from mcprl.training.policy import Policy, build_policy, load_policy_weights
from mcprl.training.rollout import episode_progress


def evaluate_tasks(policy: Policy, tasks: list[SkyRLSample], out: Path, *, n: int, temperature: float,
                   max_input_length: int, label: str, reference: Path | None = None,
                   console: Console | None = None) -> dict[str, Any]:
    """n episodes per task at `temperature`, written to `out`; `reference` (an earlier eval dir) enables
    the tool-collapse alarm."""
    with episode_progress(label, len(tasks) * n, console) as on_episode:
        result = policy.rollouts.run(tasks, n, policy.rollouts.sampling(temperature), on_episode)
    return write_eval_outputs(out, result.trajectories, reference_dir=reference, ks=sorted({1, n}),
                              max_input_tokens=max_input_length, console=console)


def evaluate_in_run(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], run_dir: Path, name: str,
                    prefix: str = "", console: Console | None = None) -> dict[str, Any]:
    """One of a training run's evals, into RUN_DIR/eval_{prefix}{name}/ (`prefix` "natural_" names the
    natural set's), compared with the run's base eval for the tool-collapse alarm."""
    subset = tasks[:cfg.eval.max_tasks] if cfg.eval.max_tasks else tasks
    reference = run_dir / f"eval_{prefix}base"
    return evaluate_tasks(policy, subset, run_dir / f"eval_{prefix}{name}", n=cfg.eval.n_samples,
                          temperature=cfg.eval.temperature, max_input_length=cfg.rollout.max_input_length,
                          label=f"eval_{prefix}{name}", console=console,
                          reference=reference if name != "base" and reference.exists() else None)


def run_eval(model: str, data: Path, *, n: int = 1, temperature: float = 0.0, out: Path,
             config: Path | None = None, overrides: list[str] | None = None, max_tasks: int | None = None,
             reference: Path | None = None) -> dict[str, Any]:
    """`mcprl eval run -m M -d FILE --n K`: K samples per task of a model, a local dir or a checkpoint."""
    cfg = load_train_config(config, overrides or [])
    try:  # the data before the model: a wrong path fails in a moment, not after the model has loaded
        tasks = read_samples(data)[:max_tasks] if max_tasks else read_samples(data)
    except (OSError, ValueError) as err:
        raise ConfigError(str(err)) from None
    weights, tokenizer = load_policy_weights(model)
    policy = build_policy(cfg, model=weights, tokenizer=tokenizer)
    try:
        return evaluate_tasks(policy, tasks, out, n=n, temperature=temperature, reference=reference,
                              max_input_length=cfg.rollout.max_input_length, label=f"eval {data.name}")
    finally:
        policy.engine.close()
