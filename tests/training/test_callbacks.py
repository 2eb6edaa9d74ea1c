"""Training callbacks: the run record, the PPO health check, W&B offline without secrets, the console line."""

import dataclasses
import importlib.util
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from mcprl.training.callbacks import (
    WANDB_ID_FILE,
    CallbackList,
    ConsoleCallback,
    MetricsJsonlCallback,
    PPOHealthCallback,
    TensorboardCallback,
    TrainingHealthError,
    WandbCallback,
    build_callbacks,
    eval_numbers,
    flatten_numbers,
    trim_metrics,
)
from mcprl.training.config import ConfigError, TrainConfig, load_train_config

SECRET = "sk-test-secret-0123456789abcdef"
CONFIG_TOKEN = "tok-config-secret-42"


def grpo_row(ratio_std: float, signal: float = 0.5, **extra) -> dict:
    return {"phase": "grpo", "reward_mean": 0.3, "ratio_mean": 1.0, "ratio_std": ratio_std,
            "frac_prompts_with_signal": signal, "policy_loss": 0.01, "kl": 0.0, **extra}


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_metrics_jsonl_writes_the_run_record(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    cfg = TrainConfig()
    cb = MetricsJsonlCallback(tmp_path / "run")
    cb.on_train_start(cfg, tmp_path / "run")
    cb.on_step(1, {"phase": "sft", "sft_loss": np.float32(2.5), "lr": 3e-4})
    cb.on_step(1, {"phase": "grpo", "reward_mean": float("nan"), "kl": float("inf"), "success_rate": np.float64(0.25),
                   "clip_frac": 0, "episode_len": np.int64(3)})
    cb.on_train_end({"eval_grpo": {"overall": {"success_rate": 0.5}}, "note": f"key was {SECRET}"})

    assert load_train_config(tmp_path / "run" / "config.yaml") == cfg
    sft, grpo = read_rows(tmp_path / "run" / "metrics.jsonl")
    assert sft == {"step": 1, "phase": "sft", "sft/loss": 2.5, "sft/lr": 3e-4, "sft/step_s": sft["sft/step_s"]}
    assert grpo["rollout/reward_mean"] is None and grpo["update/kl"] is None
    assert grpo["rollout/success_rate"] == 0.25 and grpo["rollout/episode_len"] == 3 and grpo["update/clip_frac"] == 0
    assert grpo["time/step_s"] >= 0 and not [k for k in grpo if "/" not in k and k not in ("step", "phase")]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["eval_grpo"] == {"overall": {"success_rate": 0.5}}
    assert SECRET not in (tmp_path / "run" / "summary.json").read_text()


def test_metrics_jsonl_appends_across_restarts(tmp_path):
    for step in (1, 2):
        MetricsJsonlCallback(tmp_path).on_step(step, {"phase": "grpo", "reward_mean": step / 10})
    assert [r["step"] for r in read_rows(tmp_path / "metrics.jsonl")] == [1, 2]


def test_a_resume_moves_the_rows_logged_after_its_checkpoint_aside(tmp_path):
    """Killed after GRPO step 7 with the last checkpoint at step 5: the record keeps SFT 1-3 and GRPO 1-5 (and
    a row the trainer did not write), the resumed steps 6-7 are logged once, and the superseded rows are kept
    beside it."""
    cb = MetricsJsonlCallback(tmp_path)
    for step in (1, 2, 3):
        cb.on_step(step, {"phase": "sft", "sft_loss": 1.0 / step})
    for step in range(1, 8):
        cb.on_step(step, {"phase": "grpo", "reward_mean": step / 10})
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"note": "mine"}\n{"step": 8, "phase": "gr')  # the user's row; a line cut short by the kill

    assert trim_metrics(tmp_path, sft_step=3, grpo_step=5) == 3
    for step in (6, 7):
        cb.on_step(step, {"phase": "grpo", "reward_mean": step / 10})
    rows = read_rows(tmp_path / "metrics.jsonl")
    assert [(r.get("phase"), r.get("step")) for r in rows] == [
        *[("sft", s) for s in (1, 2, 3)], *[("grpo", s) for s in range(1, 6)], (None, None),
        ("grpo", 6), ("grpo", 7)]
    superseded = (tmp_path / "metrics.superseded.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in superseded[:2]] == [6, 7]
    assert superseded[2] == '{"step": 8, "phase": "gr'
    assert trim_metrics(tmp_path, sft_step=3, grpo_step=7) == 0  # a run that finished its steps keeps them all
    assert trim_metrics(tmp_path, sft_step=2, grpo_step=0) == 8  # back into SFT: its later steps and all of GRPO
    assert trim_metrics(tmp_path / "fresh", sft_step=0, grpo_step=0) == 0


def test_health_check_trips_after_patience_flat_steps_with_an_explanation():
    cb = PPOHealthCallback(patience=3)
    cb.on_step(1, grpo_row(0.0))
    cb.on_step(2, grpo_row(1e-10))
    with pytest.raises(TrainingHealthError) as err:
        cb.on_step(3, grpo_row(0.0))
    message = str(err.value)
    assert "3 GRPO steps in a row (steps 1-3)" in message
    assert "rollout logprobs not captured" in message and "old_logprobs == current" in message
    assert "lr 0" in message and "optimizer not stepping" in message
    assert "LoRA adapter is not synced to the rollout engine" in message


def test_health_check_stays_quiet_when_the_policy_moves_or_there_is_no_signal():
    cb = PPOHealthCallback(patience=2)
    for step in range(1, 8):
        cb.on_step(step, grpo_row(0.0 if step % 2 else 0.03))  # never two flat steps in a row
    for step in range(8, 12):
        cb.on_step(step, grpo_row(0.0, signal=0.0, reward_var_per_prompt_mean=0.0))  # nothing to learn from
    for step in range(12, 16):
        cb.on_step(step, {"phase": "sft", "sft_loss": 1.0, "ratio_std": 0.0})
    assert len(cb.history) == 11
    PPOHealthCallback(patience=0).on_step(1, grpo_row(0.0))


def test_health_check_signal_from_reward_variance_alone():
    cb = PPOHealthCallback(patience=1)
    with pytest.raises(TrainingHealthError):
        cb.on_step(1, {"phase": "grpo", "ratio_std": 0.0, "reward_var_per_prompt_mean": 0.1})


def test_health_check_warns_without_stopping(caplog):
    cb = PPOHealthCallback(patience=3)
    cb.on_step(1, grpo_row(0.02, policy_loss=float("nan")))
    cb.on_step(2, grpo_row(0.02, kl=5.0))
    cb.on_step(3, grpo_row(0.02, ratio_mean=1.6))
    assert [w.split(":")[0] for w in cb.warnings] == ["step 1", "step 2", "step 3"]
    assert "NaN" in cb.warnings[0] and "approx KL between the sampling and the updated policy is 5" in cb.warnings[1]
    assert "ratio_mean is 1.6" in cb.warnings[2]
    assert len(caplog.records) == 3


def test_callback_list_records_the_step_that_trips_the_health_check(tmp_path):
    cfg = load_train_config(Path(__file__).parents[2] / "configs" / "quickstart.yaml",
                            ["algo.health_patience=2", "logging.wandb.enabled=false", "logging.console_every=0"])
    cbs = build_callbacks(cfg, tmp_path)
    cbs.on_step(1, grpo_row(0.0))
    with pytest.raises(TrainingHealthError):
        cbs.on_step(2, grpo_row(0.0))
    assert [r["step"] for r in read_rows(tmp_path / "metrics.jsonl")] == [1, 2]


def test_build_callbacks_follows_the_config(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    default = build_callbacks(TrainConfig(), tmp_path)
    assert isinstance(default, CallbackList)
    expected = [MetricsJsonlCallback, ConsoleCallback, PPOHealthCallback]
    if importlib.util.find_spec("wandb"):
        expected.insert(2, WandbCallback)
    assert [type(cb) for cb in default] == expected
    assert next(cb for cb in default if isinstance(cb, PPOHealthCallback)).patience == 3
    quiet = TrainConfig()
    quiet.logging.wandb.enabled = False
    quiet.logging.console_every = 0
    quiet.algo.health_patience = 0
    assert [type(cb) for cb in build_callbacks(quiet, tmp_path)] == [MetricsJsonlCallback]


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is not None, reason="tensorboard is installed")
def test_tensorboard_without_the_package_is_a_clear_config_error(tmp_path):
    cfg = TrainConfig()
    cfg.logging.tensorboard = True
    with pytest.raises(ConfigError, match="needs the tensorboard package: pip install tensorboard"):
        build_callbacks(cfg, tmp_path)
    with pytest.raises(ConfigError):
        TensorboardCallback(tmp_path)


def test_console_line():
    buffer = io.StringIO()
    cb = ConsoleCallback({"grpo": 20, "sft": None}, every=2, console=Console(file=buffer, width=60))
    cb.on_step(1, grpo_row(0.02))
    cb.on_step(2, {"phase": "grpo", "reward_mean": 0.4, "reward_std": 0.3, "success_rate": 0.25,
                   "policy_loss": 0.0131, "kl": 0.001, "ratio_mean": 1.0, "ratio_std": 0.02,
                   "tool_success_rate": 0.8, "lr": 1e-4, "rollout_tok_s": 117.6, "time_s": 41.23})
    cb.on_step(4, {"phase": "sft", "sft_loss": 1.25, "lr": 3e-4})
    first, second = buffer.getvalue().splitlines()
    assert first.startswith("grpo 2/20  reward 0.400±0.300  success 25%  loss 0.0131  kl 0.0010  ratio 1.000±0.020  "
                            "tool ok 80%  lr 1.0e-04  rollout tok/s 118  41.2 s/step")
    assert second.startswith("sft 4/?  loss 1.2500  lr 3.0e-04")


def test_flatten_numbers_lifts_overall():
    results = {"overall": {"success_rate": 0.5, "n": 4}, "by_complexity": {"simple": {"success_rate": 1.0}},
               "model": "x", "bad": math.nan}
    assert flatten_numbers(results, "eval/base") == {"eval/base/success_rate": 0.5, "eval/base/n": 4,
                                                     "eval/base/by_complexity/simple/success_rate": 1.0}


def test_eval_numbers_leave_out_the_per_task_map():
    results = {"overall": {"success_rate": 0.5, "ci95_pass@1": [0.2, 0.8]}, "per_task": {"t1": 1.0, "t2": 0.0}}
    assert eval_numbers(results, "sft") == {"eval/sft/success_rate": 0.5}


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed")
def test_wandb_offline_run_logs_the_keys_and_no_secret(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.chdir(tmp_path)
    cfg = TrainConfig()
    cfg.run.name = "wandb-test"
    cfg.logging.wandb.tags = ["smoke", SECRET]
    cfg.reward.judge = dataclasses.replace(cfg.reward.judge, model="judge-model")
    cfg.reward.options = {"api_key": CONFIG_TOKEN}  # a secret-named key: redacted before W&B sees the config
    run_dir = tmp_path / "run"
    ckpt = run_dir / "checkpoints" / "step_5"
    ckpt.mkdir(parents=True)
    (ckpt / "adapter_model.safetensors").write_bytes(b"weights")
    (ckpt / "adapter_config.json").write_text("{}")
    (ckpt / "optimizer.pt").write_bytes(b"state")

    cb = WandbCallback(cfg)
    assert cb.mode == "offline"
    cb.on_train_start(cfg, run_dir)
    cb.on_step(1, {"phase": "sft", "sft_loss": 2.0, "lr": 3e-4})
    cb.on_step(1, grpo_row(0.02, tool_success_rate=0.75, success_rate=0.5))
    cb.on_eval("base", {"overall": {"success_rate": 0.125}})
    cb.on_checkpoint(5, ckpt)
    cb.on_train_end({"final_reward": 0.4})

    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    record = next(runs[0].glob("run-*.wandb")).read_bytes()
    for key in (b"rollout/reward_mean", b"update/policy_loss", b"update/ratio_std", b"rollout/tool_success_rate",
                b"rollout/success_rate", b"rollout/frac_prompts_with_signal", b"sft/loss", b"sft/lr", b"eval/base/success_rate", b"judge-model", b"smoke"):
        assert key in record, key
    saved = {p.name for p in (runs[0] / "files").rglob("*")}
    assert {"adapter_model.safetensors", "adapter_config.json"} <= saved and "optimizer.pt" not in saved
    for path in (run_dir / "wandb").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert SECRET.encode() not in data and CONFIG_TOKEN.encode() not in data, path


def test_tensorboard_gets_every_key_under_its_namespaced_name(tmp_path, monkeypatch):
    """The same names as metrics.jsonl and W&B, every key included (the writer is faked: tensorboard is optional)."""
    import sys
    import types

    scalars: list[tuple[str, float, int]] = []

    class Writer:
        def __init__(self, log_dir: str) -> None:
            self.log_dir = log_dir

        def add_scalar(self, tag: str, value: float, step: int) -> None:
            scalars.append((tag, value, step))

        def close(self) -> None: ...

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", types.SimpleNamespace(SummaryWriter=Writer))
    cb = TensorboardCallback(tmp_path)
    cb.on_step(1, {"phase": "sft", "sft_loss": 2.0, "lr": 3e-4})
    cb.on_step(1, grpo_row(0.02, rollout_s=4.0, adv_abs_mean=0.3, some_new_metric=1.0))
    tags = {tag for tag, _, _ in scalars}
    assert tags == {"sft/loss", "sft/lr", "rollout/reward_mean", "update/ratio_mean", "update/ratio_std",
                    "rollout/frac_prompts_with_signal", "update/policy_loss", "update/kl", "time/rollout_s",
                    "update/adv_abs_mean", "grpo/some_new_metric"}


def test_a_critic_that_explains_nothing_is_reported_once_after_its_warm_up():
    cb = PPOHealthCallback(patience=2)
    rows = [{"phase": "grpo", "critic_explained_variance": -0.2, "critic_only": 1.0}] * 3  # warm-up: not judged
    rows += [{"phase": "grpo", "critic_explained_variance": ev} for ev in (0.0, -0.1, -0.3, 0.4)]
    for step, row in enumerate(rows, 1):
        cb.on_step(step, row)
    assert len(cb.warnings) == 1 and "step 5: critic explained variance has been <= 0 for 2 steps" in cb.warnings[0]


class _FakeWandbRun:
    def define_metric(self, *args, **kwargs) -> None:
        pass


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed")
@pytest.mark.parametrize(("mode", "resume", "continues"), [
    ("online", True, True),  # a resume continues the directory's W&B run
    ("online", False, False),  # a fresh start in the same directory is a new W&B run
    ("offline", True, False),  # W&B cannot resume offline runs: a new one, never the same id
])
def test_wandb_resumes_the_directorys_run_only_online(tmp_path, monkeypatch, mode, resume, continues):
    import wandb

    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    calls = []
    monkeypatch.setattr(wandb, "init", lambda **kw: calls.append(kw) or _FakeWandbRun())
    cfg = TrainConfig()
    cfg.logging.wandb.mode = mode
    (tmp_path / WANDB_ID_FILE).write_text("run-1\n")

    WandbCallback(cfg, resume=resume).on_train_start(cfg, tmp_path)

    (call,) = calls
    assert (call["id"] == "run-1", call["resume"]) == (continues, "allow" if continues else None)
    assert (tmp_path / WANDB_ID_FILE).read_text() == call["id"]  # the next --resume continues this one
