"""Checkpoints that resume exactly: weights (or LoRA adapter), optimizer, scheduler, every RNG, data
position, phase and step. Layout: RUN_DIR/checkpoints/step_<phase>_<N>/ (the final one `step_done`)
plus a `latest` pointer."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from peft import PeftModel, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mcprl.training.sft import WeightAverage

STATE_FILE = "trainer_state.json"
WARM_START = "step_grpo_0"  # the SFT result: never pruned, so GRPO can be re-run from it


@dataclass
class TrainState:
    phase: str = "sft"  # sft | grpo | done
    sft_step: int = 0
    grpo_step: int = 0
    sft_batches_drawn: int = 0  # data position: SFT batches consumed from the seeded stream
    grpo_prompts_drawn: int = 0  # data position: prompts consumed from the seeded stream
    elapsed_s: float = 0.0  # training seconds before this process
    sft_seconds: float | None = None  # training seconds when SFT ended (the pace `--equal-time` matches)
    evals: dict[str, Any] = field(default_factory=dict)  # name -> overall metrics
    probe: dict[str, float] | None = None  # family -> the warm start's greedy pass rate (experimental.probe), once probed
    warm_start: str | None = None  # the checkpoint GRPO began from (None: the base model), the KL reference
    guard: dict[str, Any] | None = None  # experimental.guard: best, best_step, checkpoint (never pruned), probes

    @property
    def tag(self) -> str:
        """`sft_N`, `grpo_N`, or `done`: the final checkpoint's name does not depend on how many steps
        a time cap allowed, so commands that load it work on any machine."""
        if self.phase == "done":
            return "done"
        return f"{self.phase}_{self.grpo_step if self.phase == 'grpo' else self.sft_step}"


def rng_state(extra: dict[str, torch.Generator] | None = None) -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "generators": {k: g.get_state() for k, g in (extra or {}).items()}}


def set_rng_state(state: dict[str, Any], extra: dict[str, torch.Generator] | None = None) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():  # dropout on a GPU; a CPU-only resume has none to restore
        torch.cuda.set_rng_state_all(state["cuda"])
    for name, gen in (extra or {}).items():
        if name in state["generators"]:
            gen.set_state(state["generators"][name])


def save_checkpoint(run_dir: Path, state: TrainState, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    optimizer: torch.optim.Optimizer | None, scheduler: Any, generators: dict[str, torch.Generator],
                    keep: int = 2, averaged: WeightAverage | None = None) -> Path:
    path = checkpoint_dir(run_dir, state)
    root, tmp = path.parent, path.parent / f".tmp_{state.tag}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / "model")  # a PEFT model writes only its adapter
    tokenizer.save_pretrained(tmp / "model")
    torch.save({"optimizer": optimizer.state_dict() if optimizer else None,
                "scheduler": scheduler.state_dict() if scheduler else None,
                "rng": rng_state(generators),
                "averaged": averaged.state_dict() if averaged is not None else None}, tmp / "training.pt")
    (tmp / STATE_FILE).write_text(json.dumps(asdict(state), indent=1))
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)
    (root / "latest").write_text(path.name)
    kept = {p.resolve() for p in (path, root / WARM_START, *([Path(state.guard["checkpoint"])] if state.guard else []))}
    older = sorted((p for p in root.glob("step_*") if p.resolve() not in kept),
                   key=lambda p: p.stat().st_mtime)
    for old in older[:max(0, len(older) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def checkpoint_dir(run_dir: Path, state: TrainState) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{state.tag}"


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if path.exists() else None


def checked_checkpoint(path: Path) -> Path:
    """A checkpoint directory given by a user, or a ConfigError naming what is wrong with it."""
    from mcprl.errors import ConfigError

    if not (Path(path) / STATE_FILE).is_file():
        raise ConfigError(f"--resume-from {path}: not a checkpoint directory (no {STATE_FILE}); "
                          "checkpoints live in RUN_DIR/checkpoints/step_<phase>_<N>")
    return Path(path)


def load_weights(path: Path, model: PreTrainedModel) -> None:
    """Load a checkpoint's weights into `model` in place (adapter into a PEFT model, else full weights)."""
    weights = Path(path) / "model"
    if isinstance(model, PeftModel):
        set_peft_model_state_dict(model, load_file(str(weights / "adapter_model.safetensors")))
    else:
        files = sorted(weights.glob("*.safetensors"))
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        missing, _ = model.load_state_dict(state, strict=False)
        if [m for m in missing if "lm_head" not in m]:  # tied embeddings are not saved twice
            raise ValueError(f"checkpoint {path} lacks weights: {missing[:5]}")


def restore_policy(path: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """Weights and optimizer from a checkpoint (one saved without an optimizer state empties the optimizer's);
    returns the rest of its training state."""
    load_weights(path, model)
    extra = torch.load(Path(path) / "training.pt", weights_only=False)
    if optimizer is not None:
        if extra["optimizer"] is not None:
            optimizer.load_state_dict(extra["optimizer"])
        else:
            optimizer.state.clear()
    return extra


def load_checkpoint(path: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer | None, scheduler: Any,
                    generators: dict[str, torch.Generator], averaged: WeightAverage | None = None) -> TrainState:
    extra = restore_policy(path, model, optimizer)
    if scheduler is not None and extra["scheduler"] is not None:
        scheduler.load_state_dict(extra["scheduler"])
    if averaged is not None and extra.get("averaged") is not None:
        averaged.load_state_dict(extra["averaged"])
    set_rng_state(extra["rng"], generators)
    return read_state(path)


def read_state(path: Path) -> TrainState:
    return TrainState(**json.loads((Path(path) / STATE_FILE).read_text()))
