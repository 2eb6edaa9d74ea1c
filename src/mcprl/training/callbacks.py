"""Training callbacks: what the trainer reports, and where it goes.

The trainer calls five hooks and knows nothing of the sinks behind them:

    cbs = build_callbacks(cfg, run_dir)
    cbs.on_train_start(cfg, run_dir)
    cbs.on_step(step, {"phase": "grpo", "reward_mean": ..., ...})   # one call per optimizer step
    cbs.on_eval("base", results); cbs.on_checkpoint(step, path)
    cbs.on_train_end(summary)                                          # also after a failure

The trainer's metrics have short names (`reward_mean`); every sink writes them under one namespaced
name each (`rollout/reward_mean`, `update/ratio_std`, `time/rollout_s`: `mcprl.metric_names`, listed in
docs/metrics.md).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import secrets
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from mcprl.errors import ConfigError, McprlError
from mcprl.metric_names import GRPO_NAMES, namespaced, phase_of
from mcprl.redact import redact
from mcprl.training.config import TrainConfig, resolve_wandb_mode, save_config

log = logging.getLogger(__name__)

# Checkpoint files that are training state, not the model; never uploaded.
_STATE_PREFIXES = ("optimizer", "scheduler", "rng")


class TrainingHealthError(McprlError, RuntimeError):
    """Training cannot learn as configured; the message lists the usual causes."""


class Callback:
    """Hooks the trainer calls; every method is a no-op unless overridden."""

    def on_train_start(self, cfg: TrainConfig, run_dir: Path) -> None: ...

    def on_step(self, step: int, metrics: dict[str, Any]) -> None: ...

    def on_eval(self, name: str, results: dict[str, Any]) -> None: ...

    def on_checkpoint(self, step: int, path: Path) -> None: ...

    def on_train_end(self, summary: dict[str, Any]) -> None: ...


class CallbackList(Callback):
    """Calls each callback in order; an exception (e.g. TrainingHealthError) stops the chain and propagates."""

    def __init__(self, callbacks: Iterable[Callback] = ()) -> None:
        self.callbacks = list(callbacks)

    def __iter__(self) -> Iterator[Callback]:
        return iter(self.callbacks)

    def __len__(self) -> int:
        return len(self.callbacks)

    def on_train_start(self, cfg: TrainConfig, run_dir: Path) -> None:
        for cb in self.callbacks:
            cb.on_train_start(cfg, Path(run_dir))

    def on_step(self, step: int, metrics: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_step(step, metrics)

    def on_eval(self, name: str, results: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_eval(name, results)

    def on_checkpoint(self, step: int, path: Path) -> None:
        for cb in self.callbacks:
            cb.on_checkpoint(step, Path(path))

    def on_train_end(self, summary: dict[str, Any]) -> None:
        for cb in self.callbacks:
            cb.on_train_end(summary)


def to_number(value: Any) -> float | int | None:
    """A finite number for trackers: numpy/torch scalars unwrapped; NaN, inf and non-numbers -> None."""
    if hasattr(value, "item") and not isinstance(value, (int, float)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return None


SUMMARY_FILE = "summary.json"


def _json_safe(value: Any) -> Any:
    """Plain JSON: NaN/inf -> null, numpy/torch values -> numbers or lists, anything else -> str."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "tolist"):
        value = value.tolist()
        if isinstance(value, list):
            return _json_safe(value)
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


class MetricsJsonlCallback(Callback):
    """The run record `mcprl report` reads: config.yaml at start, one metrics.jsonl row per step
    (NaN/inf written as null; `time_s` since start added when missing), summary.json at the end."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / "metrics.jsonl"
        self._t0 = time.monotonic()

    def on_train_start(self, cfg: TrainConfig, run_dir: Path) -> None:
        self._t0 = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        save_config(cfg, self.run_dir / "config.yaml")

    def on_step(self, step: int, metrics: dict[str, Any]) -> None:
        row = namespaced({"step": step, "time_s": round(time.monotonic() - self._t0, 3), **metrics})
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(_json_safe(row), allow_nan=False) + "\n")

    def on_train_end(self, summary: dict[str, Any]) -> None:
        write_summary(self.run_dir, summary)


def trim_metrics(run_dir: Path, sft_step: int, grpo_step: int) -> int:
    """Moves the metrics.jsonl rows logged after the checkpoint a run resumes from to
    metrics.superseded.jsonl, and returns how many.

    A run killed between checkpoints has logged steps it will train again; without this the record holds
    both copies, and the report counts, times and plots each repeated step twice. A line cut short by the
    kill moves too: its step is logged again."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return 0
    last = {"sft": sft_step, "grpo": grpo_step}
    kept: list[str] = []
    moved: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            (kept if _logged_by(line, last) else moved).append(line + "\n")
    if moved:
        with (run_dir / "metrics.superseded.jsonl").open("a", encoding="utf-8") as fh:
            fh.write("".join(moved))
        path.write_text("".join(kept), encoding="utf-8")
    return len(moved)


def _logged_by(line: str, last: Mapping[str, int]) -> bool:
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return False
    if not isinstance(row, dict) or not isinstance(row.get("step"), int):
        return True  # not a step row this run wrote: the user's, kept
    return row["step"] <= last.get(phase_of(row), row["step"])


def write_summary(run_dir: Path, summary: Mapping[str, Any]) -> None:
    """RUN_DIR/summary.json, secrets redacted and NaN/inf written as null."""
    run_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_json_safe(redact(summary)), indent=1, allow_nan=False)
    (run_dir / SUMMARY_FILE).write_text(text + "\n", encoding="utf-8")


class PPOHealthCallback(Callback):
    """Stops a run that cannot learn and warns about one that is drifting.

    Stops (TrainingHealthError) when `ratio_std` stays below `min_std` for `patience` consecutive
    GRPO steps that had learning signal (`frac_prompts_with_signal` or `reward_var_per_prompt_mean`
    > 0): the policy that is trained is then indistinguishable from the one that sampled.
    Warns on a NaN loss, KL above `max_kl` and `ratio_mean` further than `ratio_tol` from 1.
    """

    def __init__(self, patience: int = 3, *, min_std: float = 1e-8, max_kl: float = 1.0,
                 ratio_tol: float = 0.2) -> None:
        self.patience = patience
        self.min_std = min_std
        self.max_kl = max_kl
        self.ratio_tol = ratio_tol
        self.flat_steps: list[int] = []
        self.flat_critic = 0  # steps in a row with the critic's explained variance <= 0
        self.history: list[dict[str, float | None]] = []
        self.warnings: list[str] = []

    def on_step(self, step: int, metrics: dict[str, Any]) -> None:
        if metrics.get("phase", "grpo") != "grpo":
            return
        self._watch_critic(step, metrics)
        if "ratio_std" not in metrics:
            return
        m = {k: to_number(metrics.get(k)) for k in ("ratio_mean", "ratio_std", "clip_frac", "kl", "entropy")}
        self.history.append({"step": step, **m})
        self._warnings(step, metrics, m)
        signal = any((to_number(metrics.get(k)) or 0) > 0
                     for k in ("frac_prompts_with_signal", "reward_var_per_prompt_mean"))
        flat = m["ratio_std"] is not None and abs(m["ratio_std"]) < self.min_std
        self.flat_steps = [*self.flat_steps, step] if flat and signal else []
        if self.patience and len(self.flat_steps) >= self.patience:
            raise TrainingHealthError(self._explain())

    def _warnings(self, step: int, metrics: dict[str, Any], m: dict[str, float | None]) -> None:
        loss = metrics.get("policy_loss")
        if loss is not None and to_number(loss) is None:
            self._warn(step, f"policy_loss is {loss} (NaN/inf): check the learning rate, the advantages "
                             f"(a group with zero std and grpo_norm_by_std) and the logprobs for -inf")
        if m["kl"] is not None and m["kl"] > self.max_kl:
            self._warn(step, f"approx KL between the sampling and the updated policy is {m['kl']:.3g} "
                             f"(> {self.max_kl}): one update moved the policy far; lower algo.lr or raise algo.kl_coef")
        if m["ratio_mean"] is not None and abs(m["ratio_mean"] - 1) > self.ratio_tol:
            self._warn(step, f"ratio_mean is {m['ratio_mean']:.3g}, far from 1: the rollout logprobs do not match the "
                             f"trainer's forward pass (token alignment, chat template, temperature, stale weights)")

    def _watch_critic(self, step: int, metrics: dict[str, Any]) -> None:
        """PPO's critic: explained variance at or below 0 for `patience` steps after its warm-up is a warning
        (once): its values explain nothing of the returns, so GAE's advantages are the raw returns' noise."""
        ev = to_number(metrics.get("critic_explained_variance"))
        if ev is None or metrics.get("critic_only"):
            return
        self.flat_critic = self.flat_critic + 1 if ev <= 0 else 0
        if self.patience and self.flat_critic == self.patience:
            self._warn(step, f"critic explained variance has been <= 0 for {self.patience} steps (now {ev:.3g}): its "
                             f"values explain none of the returns. Usual causes: (1) the value head is not learning "
                             f"(critic.lr too low, or its parameters frozen); (2) rewards too sparse to fit (most "
                             f"returns equal; shaped step rewards help); (3) critic.lr too high (value_loss rising); "
                             f"critic.warmup_steps gives it steps alone first")

    def _warn(self, step: int, message: str) -> None:
        self.warnings.append(f"step {step}: {message}")
        log.warning("step %s: %s", step, message)

    def _explain(self) -> str:
        steps = self.flat_steps
        return (
            f"PPO ratio std stayed below {self.min_std:g} for {len(steps)} GRPO steps in a row "
            f"(steps {steps[0]}-{steps[-1]}) although the advantages were non-zero, so the policy never moves away "
            f"from the one that sampled. Usual causes: (1) rollout logprobs not captured, so old_logprobs == current "
            f"logprobs; (2) the policy is not updated: lr 0, frozen or no trainable parameters, the optimizer not "
            f"stepping; (3) the LoRA adapter is not synced to the rollout engine, which keeps sampling stale weights. "
            f"Raise algo.health_patience, or set it to 0 to disable this check."
        )


class ConsoleCallback(Callback):
    """One line per step: step/total, phase, reward, success, loss, kl, ratio, tool ok, lr, rollout tok/s, s/step."""

    def __init__(self, total_steps: Mapping[str, int | None], every: int = 1, console: Any = None) -> None:
        from rich.console import Console

        self.total_steps = dict(total_steps)
        self.every = max(every, 1)
        self.console = console or Console(highlight=False)
        self._last = time.monotonic()

    def on_train_start(self, cfg: TrainConfig, run_dir: Path) -> None:
        self._last = time.monotonic()

    def on_step(self, step: int, metrics: dict[str, Any]) -> None:
        now = time.monotonic()
        seconds, self._last = now - self._last, now
        seconds = to_number(metrics.get("time_s")) or seconds  # the step's own time, not evals in between
        if step % self.every == 0:
            self.console.print(self.format_line(step, metrics, seconds), soft_wrap=True)

    def format_line(self, step: int, metrics: Mapping[str, Any], seconds: float) -> str:
        phase = phase_of(metrics)
        parts = [f"[bold]{phase}[/bold] {step}/{self.total_steps.get(phase) or '?'}"]
        loss = "sft_loss" if phase == "sft" else "policy_loss"
        for label, key, spread, fmt in _CONSOLE_FIELDS:
            value = to_number(metrics.get(loss if key == "loss" else key))
            std = to_number(metrics.get(spread)) if spread else None
            if value is not None:
                parts.append(f"{label} {fmt.format(value)}" + (f"±{fmt.format(std)}" if std is not None else ""))
        parts.append(f"{seconds:.1f} s/step")
        return "  ".join(parts)


_CONSOLE_FIELDS = (  # label, metric ("loss": the phase's loss), spread metric, format
    ("reward", "reward_mean", "reward_std", "{:.3f}"), ("success", "success_rate", None, "{:.0%}"),
    ("loss", "loss", None, "{:.4f}"), ("kl", "kl", None, "{:.4f}"), ("ratio", "ratio_mean", "ratio_std", "{:.3f}"),
    ("demos", "guided_groups", None, "{:.0f}"), ("tool ok", "tool_success_rate", None, "{:.0%}"),
    ("lr", "lr", None, "{:.1e}"),
    ("rollout tok/s", "rollout_tok_s", None, "{:.0f}"),
)


WANDB_ID_FILE = "wandb_run_id"


def wandb_run_id(run_dir: Path, resume: bool, *, record: bool = True) -> tuple[str, bool]:
    """The W&B run id for a run in `run_dir` and whether it continues an earlier one: on `resume`, the id the
    directory's run started with (RUN_DIR/wandb_run_id), else a new one; `record` writes it there for the next
    resume (a dry run records nothing)."""
    id_file = Path(run_dir) / WANDB_ID_FILE
    earlier = id_file.read_text().strip() if resume and id_file.is_file() else ""
    run_id = earlier or secrets.token_hex(4)  # W&B's own ids are 8 lowercase alphanumerics too
    if record:
        id_file.parent.mkdir(parents=True, exist_ok=True)
        id_file.write_text(run_id)
    return run_id, bool(earlier)


class WandbCallback(Callback):
    """Weights & Biases; `auto` mode is online only with WANDB_API_KEY set, else offline, and never prompts.
    The config, run name and tags go through `mcprl.redact`; checkpoints are saved as links, not copies.

    A `--resume` online continues the W&B run the run directory started (its id in RUN_DIR/wandb_run_id).
    Offline it starts a new one: W&B cannot resume an offline run, and syncing a second offline run under
    the same id replaces the first one's history (wandb/wandb#5865, #3841)."""

    def __init__(self, cfg: TrainConfig, resume: bool = False) -> None:
        self.cfg = cfg
        self.mode = resolve_wandb_mode(cfg.logging.wandb)
        self.resume = resume
        self.run: Any = None

    def on_train_start(self, cfg: TrainConfig, run_dir: Path) -> None:
        if self.mode == "disabled":
            return
        os.environ["WANDB_SILENT"] = "true"
        import wandb

        w = cfg.logging.wandb
        run_dir.mkdir(parents=True, exist_ok=True)
        run_id, resuming = wandb_run_id(run_dir, self.resume and self.mode == "online")
        self.run = wandb.init(
            project=w.project, entity=w.entity, name=redact(cfg.run.name), tags=redact(list(w.tags)) or None,
            config=redact(cfg.to_dict()), dir=str(run_dir), mode=self.mode, id=run_id,
            resume="allow" if resuming else None, settings=wandb.Settings(silent=True, console="off"),
        )
        self.run.define_metric("step")
        self.run.define_metric("sft/step")
        for namespace in sorted({name.split("/")[0] for name in GRPO_NAMES.values()} | {"grpo"}):
            self.run.define_metric(f"{namespace}/*", step_metric="step")
        self.run.define_metric("sft/*", step_metric="sft/step")

    def on_step(self, step: int, metrics: dict[str, Any]) -> None:
        if self.run is None:
            return
        data = {k: to_number(v) for k, v in namespaced(metrics).items() if k not in ("phase", "step")}
        data["sft/step" if phase_of(metrics) == "sft" else "step"] = step
        self.run.log({k: v for k, v in data.items() if v is not None})

    def on_eval(self, name: str, results: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.log(eval_numbers(results, name))

    def on_checkpoint(self, step: int, path: Path) -> None:
        if self.run is None or not path.exists():
            return
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if not file.name.startswith(_STATE_PREFIXES):
                self.run.save(str(file), base_path=str(path.parent), policy="now")

    def on_train_end(self, summary: dict[str, Any]) -> None:
        if self.run is None:
            return
        import wandb

        self.run.summary.update(flatten_numbers(redact(summary), ""))
        self.run.finish()
        wandb.teardown()  # finish() returns before the run file is flushed; teardown waits for it
        self.run = None


class TensorboardCallback(Callback):
    """TensorBoard event files in RUN_DIR/tensorboard, one tag per metric (`rollout/reward_mean`, `sft/loss`)."""

    def __init__(self, run_dir: str | Path) -> None:
        if importlib.util.find_spec("tensorboard") is None:
            raise ConfigError("logging.tensorboard=true needs the tensorboard package: "
                              "pip install tensorboard (or set logging.tensorboard: false)")
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
        self._step = 0

    def on_step(self, step: int, metrics: dict[str, Any]) -> None:
        self._step = step
        for key, value in flatten_numbers({k: v for k, v in namespaced(metrics).items() if k != "step"}, "").items():
            self.writer.add_scalar(key, value, step)

    def on_eval(self, name: str, results: dict[str, Any]) -> None:
        for key, value in eval_numbers(results, name).items():
            self.writer.add_scalar(key, value, self._step)

    def on_train_end(self, summary: dict[str, Any]) -> None:
        self.writer.close()


def flatten_numbers(data: Mapping[str, Any], prefix: str) -> dict[str, float | int]:
    """Numeric leaves as `prefix/a/b`; an `overall` mapping is lifted to the top (`eval/base/success_rate`)."""
    out: dict[str, float | int] = {}
    for key, value in data.items():
        path = prefix if key == "overall" else (f"{prefix}/{key}" if prefix else str(key))
        if isinstance(value, Mapping):
            out.update(flatten_numbers(value, path))
        elif not isinstance(value, str) and (number := to_number(value)) is not None:
            out[path] = number
    return out


def eval_numbers(results: Mapping[str, Any], name: str) -> dict[str, float | int]:
    """An eval's numbers for a tracker, without the per-task map (one series per task is noise there)."""
    return flatten_numbers({k: v for k, v in results.items() if k != "per_task"}, f"eval/{name}")


def build_callbacks(cfg: TrainConfig, run_dir: str | Path, resume: bool = False) -> CallbackList:
    """The sinks the config asks for; the health check comes last so every sink records the step that trips it.
    `resume`: the run continues from one of its own checkpoints."""
    run_dir = Path(run_dir)
    callbacks: list[Callback] = [MetricsJsonlCallback(run_dir)]
    if cfg.logging.console_every > 0:
        totals = {"grpo": cfg.algo.steps, "sft": cfg.sft.max_steps}
        callbacks.append(ConsoleCallback(totals, every=cfg.logging.console_every))
    if resolve_wandb_mode(cfg.logging.wandb) != "disabled":
        callbacks.append(WandbCallback(cfg, resume))
    if cfg.logging.tensorboard:
        callbacks.append(TensorboardCallback(run_dir))
    if cfg.algo.health_patience > 0:
        callbacks.append(PPOHealthCallback(cfg.algo.health_patience))
    return CallbackList(callbacks)
