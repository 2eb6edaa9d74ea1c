"""`mcprl train --engine tinker` for real: SkyRL's Tinker server on this CPU (JAX), a tiny random llama
with the default tokenizer, real MCP tasks on mcprl's servers; SFT, two GRPO steps, a crash and
`--resume`, and the exported adapter evaluated by `mcprl eval`. About two minutes: `make test-all`."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import mcprl._skyrl  # noqa: E402,F401 - the Python 3.11 shim before any SkyRL import

pytest.importorskip("tinker")
pytest.importorskip("jax")  # SkyRL's server: `pip install -e .[tinker]` (make test-all installs it)

from mcprl.metric_names import short  # noqa: E402
from mcprl.training import run as run_module  # noqa: E402
from mcprl.training.callbacks import Callback, CallbackList  # noqa: E402
from mcprl.training.config import load_train_config  # noqa: E402
from mcprl.training.evaluate import run_eval  # noqa: E402
from mcprl.training.tinker import run  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]

@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    """A 2-layer random llama with the default model's tokenizer, as `bench/random_model.py` writes it."""
    out = tmp_path_factory.mktemp("tiny_llama")
    subprocess.run([sys.executable, str(ROOT / "bench" / "random_model.py"), "--arch", "tiny-llama", "--dtype", "float32",
                    "--out", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def reward_module():
    """Random weights never solve a task: bench/tinker_step.py's reward (each turn's length parity) gives
    groups variance to train on."""
    sys.path.insert(0, str(ROOT / "bench"))
    yield "tinker_step"
    sys.path.remove(str(ROOT / "bench"))
    sys.modules.pop("tinker_step", None)


class CrashAt(Callback):
    def __init__(self, step: int):
        self.step = step

    def on_step(self, step, metrics):
        if metrics.get("phase") == "grpo" and step == self.step:
            raise KeyboardInterrupt(f"simulated crash at GRPO step {step}")


@pytest.fixture(scope="module")
def trained(tiny_dir, reward_module, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tinker_run")
    out = tmp / "run"
    cfg = load_train_config(Path("configs/quickstart.yaml"), [
        f"model.name={tiny_dir}", f"reward.fn={reward_module}:LengthParity",
        "data.generate.n_train=8", "data.generate.n_eval=2", f"data.train={tmp / 'data' / 'train.jsonl'}",
        f"data.eval={tmp / 'data' / 'test.jsonl'}", "eval.natural=null", "eval.max_tasks=2",
        "sft.max_steps=2", "sft.batch_size=2", "sft.warmup_steps=0", "sft.max_seconds=null", "sft.max_seq_len=512",
        "algo.steps=2", "algo.prompts_per_step=2", "algo.group_size=4", "algo.save_every=1", "algo.warmup_steps=0",
        "algo.lr=1e-3", "algo.dynamic_sampling.max_sample_batches=1", "rollout.max_new_tokens=16",
        "rollout.max_turns=2", "rollout.temperature=1.0", "logging.wandb.enabled=false", "logging.console_every=0",
        f"run.output_dir={out}", "tinker.backend_config={max_lora_adapters: 4, sample_max_num_sequences: 8}"])
    original = run_module.build_callbacks
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "build_callbacks", lambda c, d, **kw: CallbackList([CrashAt(2), *original(c, d, **kw)]))
        with pytest.raises(KeyboardInterrupt):
            run.train(cfg)
    crashed = (out / "checkpoints" / "latest").read_text().strip()
    summary = run.train(cfg, resume=True)
    return cfg, out, summary, crashed


def _rows(out: Path) -> list[dict]:
    return [short(json.loads(line)) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_two_grpo_steps_train_with_finite_losses_and_aligned_logprobs(trained):
    _, out, summary, _ = trained
    rows = _rows(out)
    sft = [r for r in rows if r.get("phase") == "sft"]
    grpo = [r for r in rows if r.get("phase") == "grpo"]
    assert len(sft) == 2 and all(math.isfinite(r["sft_loss"]) and r["sft_loss"] > 0 for r in sft)
    trained_steps = [r for r in grpo if r.get("active_rows", 0) > 0]
    assert trained_steps, "no GRPO step had a group with reward variance"
    for r in trained_steps:
        assert math.isfinite(r["policy_loss"])
        # the learner scores exactly the tokens the sampler drew (SkyRL's token-in, token-out)
        assert abs(r["kl_sample_train"]) < 1e-3 and r["max_abs_logprob_gap"] < 1e-3
        assert r["sample_s"] > 0 and r["train_s"] > 0 and r["sync_s"] > 0
    assert summary["grpo_steps"] == 2 and summary["engine"] == "tinker"


def test_checkpoints_hold_the_server_state_and_an_adapter_that_changed(trained):
    _, out, _, _ = trained
    warm, done = out / "checkpoints" / "step_grpo_0", out / "checkpoints" / "step_done"
    for ckpt in (warm, done):
        state = json.loads((ckpt / "trainer_state.json").read_text())
        assert state["tinker"]["state_path"].startswith("tinker://")
        assert (ckpt / "model" / "adapter_config.json").is_file()
    before, after = (load_file(str(c / "model" / "adapter_model.safetensors")) for c in (warm, done))
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before), "GRPO left the adapter as it was"


def test_resume_continues_from_the_saved_step(trained):
    _, out, _, crashed = trained
    assert crashed == "step_grpo_1"
    rows = _rows(out)
    # the crash hit step 2 before any sink logged it; the resumed run did step 2 alone, SFT not again
    assert [r["step"] for r in rows if r.get("phase") == "grpo"] == [1, 2]
    assert len([r for r in rows if r.get("phase") == "sft"]) == 2
    assert (out / "summary.json").is_file() and (out / "report" / "report.html").is_file()


def test_the_exported_adapter_loads_in_mcprl_eval(trained, tmp_path):
    cfg, out, _, _ = trained
    results = run_eval(str(out / "checkpoints" / "step_done"), Path(cfg.data.eval), n=1, out=tmp_path / "eval",
                       overrides=[f"reward.fn={cfg.reward.fn}", "rollout.max_new_tokens=16", "rollout.max_turns=2"],
                       max_tasks=1)
    assert results["overall"]["n_tasks"] == 1
    assert (tmp_path / "eval" / "trajectories.jsonl").is_file()


def test_a_resume_after_the_last_checkpoint_runs_the_evals_it_lacks(trained):
    """A run stopped between a checkpoint and its eval (the eval runs from the checkpoint's exported adapter):
    `--resume` runs the warm start's and the final eval, and trains nothing. Last: it changes the run."""
    cfg, out, _, _ = trained
    for name in ("step_done", "step_grpo_0"):
        state_file = out / "checkpoints" / name / "trainer_state.json"
        state = json.loads(state_file.read_text())
        state["evals"] = {k: v for k, v in state["evals"].items() if k not in ("sft", "grpo")}
        state_file.write_text(json.dumps(state))
    for eval_dir in ("eval_sft", "eval_grpo"):
        (out / eval_dir / "trajectories.jsonl").unlink()
    before = _rows(out)
    summary = run.train(cfg, resume=True)
    assert {"eval_sft", "eval_grpo"} <= set(summary) and summary["grpo_steps"] == 2
    assert all((out / eval_dir / "trajectories.jsonl").is_file() for eval_dir in ("eval_sft", "eval_grpo"))
    assert [r for r in _rows(out) if r.get("phase") in ("sft", "grpo")] == [r for r in before if r.get("phase") in ("sft", "grpo")]
