"""Chaos tests (issue 49): a disk that fills during a checkpoint, checkpoints that are corrupt on `--resume`,
the trainer killed with SIGKILL mid-GRPO step, an MCP server killed while a GRPO step's calls are in flight."""

import contextlib
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from mcprl.training.checkpoint import (
    CheckpointError,
    TrainState,
    latest_checkpoint,
    load_weights,
    restore_policy,
    save_checkpoint,
)

from .tiny_model import tiny_llama


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    """A small tmpfs at `path` (a disk that fills); skips where this process may not mount one."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def tiny_checkpoint(run_dir: Path, tokenizer, step: int, model=None) -> tuple[Path, torch.nn.Module]:
    """A real checkpoint of the tiny Llama after one AdamW step (optimizer state included)."""
    model = model or tiny_llama()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    opt.step()
    path = save_checkpoint(run_dir, TrainState(phase="grpo", grpo_step=step), model, tokenizer, opt, None,
                           {"engine": torch.Generator()})
    return path, model


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one(tmp_path, tokenizer):
    """The first checkpoint fits the 6 MB disk, the second cannot (the tokenizer alone is 3.5 MB): the save
    raises a CheckpointError naming the checkpoint and the one still latest, leaves no partial directory,
    and `--resume` would load the first, whole."""
    with tmpfs(tmp_path / "disk", "6m") as disk:
        first, model = tiny_checkpoint(disk, tokenizer, 1)
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        with pytest.raises(CheckpointError) as err:
            tiny_checkpoint(disk, tokenizer, 2, model)
        message = str(err.value)
        assert "\n" not in message and str(disk / "checkpoints" / "step_grpo_2") in message
        assert "No space left on device" in message and f"{first} is still the latest" in message
        assert sorted(p.name for p in (disk / "checkpoints").iterdir()) == ["latest", "step_grpo_1"]
        assert latest_checkpoint(disk) == first
        fresh = tiny_llama()
        restore_policy(first, fresh, torch.optim.AdamW(fresh.parameters()))
        assert all(torch.equal(fresh.state_dict()[k], v) for k, v in saved.items())


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_corrupt_training_state_is_one_error_naming_its_file(tmp_path, tokenizer, damage):
    path, model = tiny_checkpoint(tmp_path, tokenizer, 1)
    for name in ("training.pt", "model/model.safetensors"):
        file = path / name
        data = file.read_bytes()
        file.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"\x00garbage" * 100)
        with pytest.raises(CheckpointError, match=f"checkpoint file {file} is unreadable"):
            if name == "training.pt":
                restore_policy(path, model, None)
            else:
                load_weights(path, model)
        file.write_bytes(data)


def resume_cli(run_dir: Path, data: Path) -> subprocess.CompletedProcess:
    """`mcprl train --resume` on `run_dir`, evals off, as a user would run it."""
    overrides = [f"run.output_dir={run_dir}", f"data.train={data / 'train.jsonl'}", f"data.eval={data / 'test.jsonl'}",
                 "data.generate.n_train=4", "data.generate.n_eval=1", "eval.before=false", "eval.after_sft=false",
                 "eval.after_grpo=false", "logging.wandb.enabled=false", "model.threads=2"]
    return subprocess.run([sys.executable, "-m", "mcprl.cli", "train", "-c", "configs/quickstart.yaml", "--resume",
                           *[a for o in overrides for a in ("-o", o)]], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("damage", ["state", *(pytest.param(d, marks=pytest.mark.slow) for d in ("pointer", "weights"))])
def test_resuming_from_a_corrupt_checkpoint_prints_one_line_naming_the_file(tmp_path, tokenizer, damage):
    """The state file and the pointer fail before the model loads, the weights once they are read; each CLI run
    costs its imports (~15 s), so only the first is in `make test`."""
    run_dir = tmp_path / "run"
    path, _ = tiny_checkpoint(run_dir, tokenizer, 1)
    if damage == "state":
        bad = path / "trainer_state.json"
        bad.write_text(bad.read_text()[:40])
    elif damage == "pointer":
        bad = run_dir / "checkpoints" / "latest"
        bad.write_text("step_grpo_7")
    else:
        bad = path / "model" / "model.safetensors"
        bad.write_bytes(bad.read_bytes()[:100])
    result = resume_cli(run_dir, tmp_path / "data")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("error: ") and str(bad) in lines[0]
