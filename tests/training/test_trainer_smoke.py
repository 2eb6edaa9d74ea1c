"""End-to-end smoke of the embedded trainer with the real default model: data -> eval -> SFT -> GRPO -> eval,
finite losses, checkpoints on disk, and an exact resume after a crash."""

import dataclasses
import json
import math
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from mcprl.eval.trajectory import load_trajectories
from mcprl.metric_names import GRPO_NAMES, PLAIN, short
from mcprl.rewards.base import STOP_REASONS
from mcprl.training import run as run_module
from mcprl.training import trainer
from mcprl.training.baseline import compare_with_run, equal_time_config, read_plan
from mcprl.training.callbacks import Callback, CallbackList
from mcprl.training.config import load_train_config
from tests.support.threads import TORCH_THREADS

# One rollout batch a GRPO step: three SFT steps of one demo leave groups that mostly tie, and the filter's two extra
# batches were half this test's time (the filter's loop: test_dynamic_sampling.py; the update: test_grpo.py).
# 12 new tokens a turn and no mid-SFT checkpoint (the crash test saves one) took the trained run 57 -> 41 s as an
# AVX2 machine: its 6 evals and 2 rollout batches decode a token at a time; a mid-SFT checkpoint writes 2.1 GB.
SMOKE = ["data.generate.n_train=8", "data.generate.n_eval=1", "sft.max_steps=3", "sft.batch_size=1",
         "sft.save_every=0", "sft.warmup_steps=1", "sft.max_seconds=null", "sft.max_seq_len=512", "algo.steps=2",
         "algo.prompts_per_step=2", "algo.group_size=2", "algo.micro_batch_size=4", "algo.save_every=0",
         "algo.dynamic_sampling.max_sample_batches=1",
         "rollout.max_new_tokens=12", "rollout.max_turns=2", "eval.max_tasks=1", "logging.wandb.enabled=false",
         "logging.console_every=0", f"model.threads={TORCH_THREADS}"]


FAKE_SECRETS = {"OPENAI_API_KEY": "sk-smoke-fake-openai-0123456789", "TAVILY_API_KEY": "tvly-smoke-fake-98765432",
                "SLACK_BOT_TOKEN": "xoxb-smoke-fake-13572468", "WANDB_API_KEY": "wandb-smoke-fake-24681357abcdef"}


def config(tmp_path, name, *extra):
    data = tmp_path / "data"
    return load_train_config("configs/quickstart.yaml", [
        *SMOKE, f"run.output_dir={tmp_path / name}", f"data.train={data / 'train.jsonl'}",
        f"data.eval={data / 'test.jsonl'}", *extra])


def rows(run_dir):
    """metrics.jsonl under the trainer's short names (the file holds the namespaced ones)."""
    return [short(json.loads(line)) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


class CrashAt(Callback):
    def __init__(self, phase, step):
        self.phase, self.step = phase, step

    def on_step(self, step, metrics):
        if metrics.get("phase") == self.phase and step == self.step:
            raise KeyboardInterrupt(f"simulated crash at {self.phase} step {step}")


def crash_then_resume(monkeypatch, cfg, phase: str, step: int, **kwargs) -> dict:
    """Train until a simulated crash after `phase` step `step`, then `--resume`: the resumed run's summary."""
    original = run_module.build_callbacks
    monkeypatch.setattr(run_module, "build_callbacks", lambda cfg, run_dir, **kw: CallbackList(
        [CrashAt(phase, step), *original(cfg, run_dir, **kw)]))
    with pytest.raises(KeyboardInterrupt):
        trainer.train(cfg, **kwargs)
    monkeypatch.setattr(run_module, "build_callbacks", original)
    return trainer.train(cfg, resume=True, **kwargs)


# One trained run (the default full fine-tune) shared by the tests below, so one failure does not hide
# the rest; LoRA (adapter checkpoints, merged generation copy) trains its own run in `make test-all`.
@pytest.fixture(scope="module", params=["full", pytest.param("lora", marks=pytest.mark.slow)])
def trained(request, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp(f"smoke_{request.param}")
    with pytest.MonkeyPatch.context() as env:  # fake keys for the secrets scan below; W&B offline, as a user's
        for name, value in FAKE_SECRETS.items():
            env.setenv(name, value)
        summary = trainer.train(config(tmp_path, "full", f"finetune.mode={request.param}",
                                       "logging.wandb.enabled=true", "logging.wandb.mode=offline"))
    run = tmp_path / "full"
    metrics = rows(run)
    return SimpleNamespace(mode=request.param, tmp_path=tmp_path, run=run, summary=summary,
                           sft=[r for r in metrics if r["phase"] == "sft"],
                           grpo=[r for r in metrics if r["phase"] == "grpo"])


def test_every_step_logs_finite_losses_and_timings(trained):
    assert [r["step"] for r in trained.sft] == [1, 2, 3] and [r["step"] for r in trained.grpo] == [1, 2]
    assert all(math.isfinite(r["sft_loss"]) for r in trained.sft)
    assert all(math.isfinite(r["policy_loss"]) and math.isfinite(r["reward_mean"]) for r in trained.grpo)
    assert all(0 < r["rollout_s"] <= r["time_s"] and r["rollout_tok_s"] > 0 for r in trained.grpo)
    assert all(r["frac_all_good"] + r["frac_all_bad"] + r["frac_mixed"] == pytest.approx(1) for r in trained.grpo)


def test_every_metric_has_one_namespaced_name(trained):
    """What a GRPO step logs is all in the name table (nothing falls back to `grpo/`), SFT's under `sft/`."""
    raw = [json.loads(line) for line in (trained.run / "metrics.jsonl").read_text().splitlines()]
    names = set(GRPO_NAMES.values()) | set(PLAIN)
    for row in raw:
        assert set(row) <= names if row["phase"] == "grpo" else all(k in PLAIN or k.startswith("sft/") for k in row)
    assert {"rollout/reward_mean", "rollout/frac_all_good", "update/ratio_std", "time/rollout_s"} <= set(raw[-1])


def test_each_grpo_steps_episodes_are_written_and_give_its_reward(trained):
    for step in trained.grpo:  # every episode of the step, as eval trajectories whose rewards give the logged mean
        episodes = load_trajectories(trained.run / "rollouts" / f"grpo_step_{step['step']}.jsonl")
        assert len(episodes) == 4 * step["sample_batches"]
        assert sum(t.reward for t in episodes) / len(episodes) == pytest.approx(step["reward_mean"])
        assert {t.stop_reason for t in episodes} <= set(STOP_REASONS)


def test_checkpoints_land_under_fixed_names(trained):
    run = trained.run
    assert (run / "checkpoints" / "latest").read_text() == "step_done"  # a fixed name, whatever the step count
    assert Path(trained.summary["final_checkpoint"]).name == "step_done"
    weights = "adapter_model.safetensors" if trained.mode == "lora" else "model.safetensors"
    assert any((p / "model" / weights).exists() for p in (run / "checkpoints").glob("step_*"))


def test_the_summary_holds_every_eval_and_the_paired_tests(trained):
    summary = trained.summary
    assert {"eval_base", "eval_sft", "eval_grpo", "train_seconds", "eval_natural", "paired_natural"} <= set(summary)
    assert set(summary["eval_natural"]) == {"base", "sft", "grpo"}  # the hand-written set, one task (eval.max_tasks)
    assert (trained.run / "eval_natural_grpo" / "trajectories.jsonl").read_text().count("\n") == 1
    assert all(summary[f"eval_{name}"]["seconds"] > 0 for name in ("base", "sft", "grpo"))
    assert all(len(summary[f"eval_{name}"]["ci95_pass@1"]) == 2 for name in ("base", "sft", "grpo"))
    assert set(summary["paired"]) == {"sft_vs_base", "grpo_vs_sft"} and summary["paired"]["grpo_vs_sft"]["tasks"] == 1
    assert json.loads((trained.run / "summary.json").read_text())["train_seconds"] > 0


def test_the_report_has_its_page_and_charts(trained):
    assert (trained.run / "report" / "report.html").exists()
    pngs = list((trained.run / "report").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


@pytest.mark.slow  # 10-30 s (an eval of one task): make test-all
def test_the_guides_commands_run_on_a_run(trained, tmp_path, monkeypatch):
    """The guides' `eval` and `report` lines as written, on this run in place of `runs/quickstart` (and of
    `runs/ppo`), its held-out file, one task; `--equal-time` planned with --dry-run (it trains: the test below)."""
    from typer.testing import CliRunner

    from mcprl.cli.main import app
    from tests.test_guides import guide_commands

    here = {"runs/quickstart": str(trained.run), "runs/ppo": str(trained.run),
            "data/processed/quickstart_test.jsonl": str(trained.tmp_path / "data" / "test.jsonl")}
    monkeypatch.chdir(tmp_path)
    lines = guide_commands("finished-run")
    assert {a[1] for a in lines} >= {"eval", "report", "train"}
    for args in lines:
        for old, new in here.items():
            args = [a.replace(old, new) for a in args]
        if "--n" in args:
            args[args.index("--n") + 1] = "1"
        args += ["--dry-run"] if "--equal-time" in args else []
        result = CliRunner().invoke(app, args[1:], catch_exceptions=False)
        assert result.exit_code == 0, f"{' '.join(args)}\n{result.output}"
    assert (tmp_path / "runs" / "eval_grpo" / "trajectories.jsonl").read_text().count("\n") == 1


@pytest.mark.slow  # 3+ minutes (its SFT and evals) on the 2-core machine: make test-all; test_baseline.py is the arithmetic
def test_sft_alone_at_equal_time_compares_with_the_run(trained):
    # `--equal-time`: SFT alone on the run's config, compared with its last eval (a shorter budget here than
    # the plan's arithmetic, test_baseline.py, would give: twice the run's SFT time is 6 steps).
    plan = read_plan(trained.run)
    assert 0 < plan.sft_seconds < trained.summary["train_seconds"] and plan.sft_steps == 3
    short = dataclasses.replace(plan, train_seconds=plan.sft_seconds * 2)
    baseline_cfg = equal_time_config(short, None, [])
    trainer.train(baseline_cfg, sft_only=True)
    baseline = Path(baseline_cfg.run.output_dir)
    record = compare_with_run(short, baseline)
    assert baseline == trained.tmp_path / "full_sft_only" and [r["step"] for r in rows(baseline)] == [1, 2, 3, 4, 5, 6]
    assert record["run_eval"] == "eval_grpo" and record["baseline_vs_run"]["tasks"] == 1
    assert json.loads((baseline / "summary.json").read_text())["equal_time"]["sft_steps"] == 6


def test_a_crash_mid_sft_resumes_exactly(trained, monkeypatch):
    # Crash after SFT step 3, the last, whose checkpoint does not exist (the last one is step 2), then resume.
    crashed = config(trained.tmp_path, "crashed", f"finetune.mode={trained.mode}", "sft.save_every=2",
                     "eval.before=false", "eval.after_sft=false", "eval.after_grpo=false")
    resumed_summary = crash_then_resume(monkeypatch, crashed, "sft", 3, sft_only=True)
    assert Path(resumed_summary["final_checkpoint"]).name == "step_grpo_0"  # GRPO can start from it later
    resumed = {(r["phase"], r["step"]): r for r in rows(trained.tmp_path / "crashed")}
    assert [k for k in resumed if k[0] == "sft"] == [("sft", 1), ("sft", 2), ("sft", 3)]
    for step in (3,):
        assert resumed[("sft", step)]["sft_loss"] == pytest.approx(
            next(r for r in trained.sft if r["step"] == step)["sft_loss"], abs=1e-4)


@pytest.mark.slow
def test_kl_to_the_warm_start_survives_a_resume_mid_grpo(tmp_path, monkeypatch):
    """Full fine-tune with a KL loss: the reference is the warm start (KL 0 at the first step, then not),
    and a run resumed after GRPO step 1 rebuilds it from that checkpoint: step 2 repeats exactly. The
    reward is bench/tinker_step.py's (each turn's length parity): two SFT steps leave groups that tie
    under the heuristic, and a step without signal would not move the policy off its reference."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "bench"))
    kl = ["algo.kl_coef=0.1", "algo.use_kl_loss=true", "sft.max_steps=2", "sft.save_every=0", "eval.before=false",
          "eval.after_sft=false", "eval.after_grpo=false", "reward.fn=tinker_step:LengthParity"]
    trainer.train(config(tmp_path, "straight", *kl))
    straight = [r for r in rows(tmp_path / "straight") if r["phase"] == "grpo"]
    assert straight[0]["ref_kl"] == pytest.approx(0.0, abs=1e-3) and straight[1]["ref_kl"] > 1e-5
    crash_then_resume(monkeypatch, config(tmp_path, "crashed", *kl), "grpo", 2)
    again = [r for r in rows(tmp_path / "crashed") if r["phase"] == "grpo"][-1]
    assert again["step"] == 2
    for key in ("policy_loss", "ref_kl", "grad_norm"):
        assert again[key] == pytest.approx(straight[1][key], abs=1e-4), key


@pytest.mark.slow
def test_ppo_with_a_critic_resumes_exactly(tmp_path, monkeypatch):
    """GAE and a LoRA critic in the real loop: critic metrics every step, the critic in the checkpoints, and a
    run resumed after GRPO step 1 repeats step 2's policy and value losses."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "bench"))
    ppo = ["algo.advantage_estimator=gae", "algo.lambd=0.95", "algo.group_size=2", "sft.max_steps=2",
           "sft.save_every=0", "eval.before=false", "eval.after_sft=false", "eval.after_grpo=false",
           "reward.fn=tinker_step:LengthParity"]
    summary = trainer.train(config(tmp_path, "straight", *ppo))
    assert summary["critic"]["steps"] == 2 and math.isfinite(summary["critic"]["value_loss"]["last"])
    straight = [r for r in rows(tmp_path / "straight") if r["phase"] == "grpo"]
    assert all("critic_value_loss" in r and "critic_explained_variance" in r for r in straight)
    assert (tmp_path / "straight" / "checkpoints" / "step_done" / "critic.pt").is_file()
    crash_then_resume(monkeypatch, config(tmp_path, "crashed", *ppo), "grpo", 2)
    again = [r for r in rows(tmp_path / "crashed") if r["phase"] == "grpo"][-1]
    assert again["step"] == 2
    for key in ("policy_loss", "critic_value_loss", "critic_values_mean"):
        assert again[key] == pytest.approx(straight[1][key], abs=1e-4), key


@pytest.mark.slow
def test_guard_ends_on_its_best_probe_and_a_resume_keeps_its_record(tmp_path, monkeypatch):
    """The guard in the real loop: a greedy probe before GRPO and after each step, decisions that follow the
    scores, the final weights equal to the best probe's checkpoint, and a crash mid-GRPO that resumes to the
    same probes."""
    guard = ["experimental.guard.every=1", "algo.save_every=0", "sft.max_steps=2", "sft.save_every=0", "eval.before=false",
             "eval.after_sft=false", "eval.after_grpo=false"]
    summary = trainer.train(config(tmp_path, "straight", *guard))
    record, run = summary["grpo_guard"], tmp_path / "straight"
    assert [p[0] for p in record["probes"]] == [0, 1, 2]
    best = -1.0
    for step, score, action in record["probes"]:
        assert action == ("best" if score >= best else "restored")  # tolerance 0
        best = max(best, score)
        assert (run / "rollouts" / f"grpo_guard_{step}.jsonl").exists()
    assert record["best"] == best and Path(record["checkpoint"]).name == f"step_grpo_{record['best_step']}"
    grpo = [r for r in rows(run) if r["phase"] == "grpo"]
    assert [r["guard_success"] for r in grpo] == [p[1] for p in record["probes"][1:]]
    final = load_file(str(run / "checkpoints" / "step_done" / "model" / "model.safetensors"))
    kept = load_file(str(Path(record["checkpoint"]) / "model" / "model.safetensors"))
    assert final.keys() == kept.keys() and all(torch.equal(final[k], kept[k]) for k in final)

    resumed = crash_then_resume(monkeypatch, config(tmp_path, "crashed", *guard), "grpo", 2)
    assert resumed["grpo_guard"]["probes"] == record["probes"]


def test_no_secret_reaches_any_file_the_run_wrote(trained):
    """The run had fake keys in its environment and W&B on (offline): no file of the run directory (the
    W&B run, trajectories, checkpoints, config, summary, report) nor any server log holds a key, plainly,
    base64-encoded or spaced out (issue 49's secrets scan)."""
    import base64

    forms = {name: [value, base64.b64encode(value.encode()).decode(), " ".join(value)]
             for name, value in FAKE_SECRETS.items()}
    files = [p for p in trained.run.rglob("*") if p.is_file()]
    files += [p for p in (Path(tempfile.gettempdir()) / "mcprl-servers").glob("*.log")]
    assert any("wandb" in p.parts for p in files) and len(files) > 20
    for path in files:
        data = path.read_bytes()
        for name, variants in forms.items():
            for form in variants:
                assert form.encode() not in data, f"{name} ({form[:12]}...) in {path}"
