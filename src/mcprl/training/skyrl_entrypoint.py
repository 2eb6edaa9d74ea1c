"""The Ray side of `--engine skyrl`, following SkyRL's `main_base` pattern.

`mcp_tool_env` must be registered inside the Ray task that runs the trainer (SkyRL PR #29): a
registration in the driver process does not exist in the worker, whose generator then fails
with "No registered env with id". The task also feeds SkyRL's trainer events into mcprl's run
record (config.yaml, metrics.jsonl, summary.json) so `mcprl report` works on cluster runs too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray

from mcprl._skyrl import CallbackInput, TrainingCallback, TrainingControl, base_ppo_exp, initialize_ray
from mcprl.training.callbacks import MetricsJsonlCallback, flatten_numbers, to_number, trim_metrics
from mcprl.training.config import TrainConfig

# SkyRL metric -> mcprl metric (the report's names). The first present source wins.
SKYRL_METRICS: dict[str, tuple[str, ...]] = {
    "reward_mean": ("reward/avg_raw_reward",),
    "success_rate": ("environment/success",),
    "policy_loss": ("policy/policy_loss",),
    "kl": ("policy/policy_kl", "loss/avg_kl"),
    "clip_frac": ("policy/loss_metrics/clip_ratio",),
    "entropy": ("policy/policy_entropy",),
    "grad_norm": ("policy/grad_norm",),
    "lr": ("policy/policy_lr",),
    "tool_success_rate": ("environment/tool_success_rate",),
    "tool_timeout_rate": ("environment/tool_timeout_rate",),
    "malformed_rate": ("environment/malformed_rate",),
    "episode_len": ("environment/turns",),
}


def register_env() -> None:
    """Importing mcprl.envs registers `mcp_tool_env` with skyrl_gym (idempotent)."""
    import mcprl.envs  # noqa: F401


def skyrl_metrics_row(logs: dict[str, Any]) -> dict[str, Any]:
    """The mcprl metrics found in one SkyRL log payload (empty when it holds none, e.g. an eval log)."""
    row: dict[str, Any] = {}
    for ours, sources in SKYRL_METRICS.items():
        value = next((to_number(logs[s]) for s in sources if s in logs and to_number(logs[s]) is not None), None)
        if value is not None:
            row[ours] = value
    return row


class RunRecordBridge(TrainingCallback):
    """Forwards SkyRL's trainer events to `MetricsJsonlCallback` (GRPO rows only; SkyRL runs no SFT)."""

    def __init__(self, train_cfg: TrainConfig, run_dir: str | Path) -> None:
        self.train_cfg = train_cfg
        self.run_dir = Path(run_dir)
        self.record = MetricsJsonlCallback(self.run_dir)
        self.evals: dict[str, dict[str, float | int]] = {}

    def on_train_start(self, trainer: Any, callback_input: CallbackInput, control: TrainingControl) -> None:
        """SkyRL has loaded its checkpoint by now: the record keeps the rows up to its step (none when fresh)."""
        moved = trim_metrics(self.run_dir, 0, callback_input.global_step)
        if moved:
            print(f"metrics.jsonl: {moved} row(s) after SkyRL's step {callback_input.global_step} moved to "
                  "metrics.superseded.jsonl")
        self.record.on_train_start(self.train_cfg, self.run_dir)

    def on_log(self, trainer: Any, callback_input: CallbackInput, control: TrainingControl) -> None:
        row = skyrl_metrics_row(callback_input.logs or {})
        if row:
            self.record.on_step(callback_input.global_step, {"phase": "grpo", **row})

    def on_eval_end(self, trainer: Any, callback_input: CallbackInput, control: TrainingControl) -> None:
        self.evals[f"step_{callback_input.global_step}"] = flatten_numbers(callback_input.metrics or {}, "")

    def on_train_end(self, trainer: Any, callback_input: CallbackInput, control: TrainingControl) -> None:
        self.record.on_train_end({"engine": "skyrl", "grpo_steps": callback_input.global_step,
                                  "skyrl_evals": self.evals})


def _experiment(cfg: Any, train_cfg: TrainConfig, run_dir: str) -> Any:
    """SkyRL's BasePPOExp with the run-record bridge on its trainer (imported here: it pulls in vLLM glue)."""
    class MCPPPOExp(base_ppo_exp()):  # type: ignore[misc]
        def get_trainer(self, *args: Any, **kwargs: Any) -> Any:
            trainer = super().get_trainer(*args, **kwargs)
            trainer.add_callback(RunRecordBridge(train_cfg, run_dir))
            return trainer

    return MCPPPOExp(cfg)


@ray.remote(num_cpus=1)
def skyrl_entrypoint(cfg: Any, train_cfg: TrainConfig, run_dir: str) -> None:
    import mcprl._skyrl  # noqa: F401 - this worker is a fresh interpreter: the shim first

    register_env()
    _experiment(cfg, train_cfg, run_dir).run()


def run(cfg: Any, train_cfg: TrainConfig, run_dir: Path) -> None:
    """Start (or join) Ray as SkyRL's main_base does and train; `cfg` is a validated MCPSkyRLTrainConfig."""
    initialize_ray(cfg)
    ray.get(skyrl_entrypoint.remote(cfg, train_cfg, str(run_dir)))
