"""Checkpoints that resume exactly: weights (or LoRA adapter), optimizer, scheduler, every RNG, data
position, phase and step. Layout: RUN_DIR/checkpoints/step_<phase>_<N>/ (the final one `step_done`)
plus a `latest` pointer.

A checkpoint is written into a temporary directory and renamed into place, and `latest` is replaced in one
rename after it, so a process killed or a disk filled mid-write leaves the previous checkpoint the one
`--resume` finds; an unreadable file (truncated, garbage) is a `CheckpointError` naming it."""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch
from safetensors.torch import load_file

from mcprl.errors import McprlError

if TYPE_CHECKING:  # peft and transformers load where weights do: `--resume-from` on a wrong path fails at once
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from mcprl.training.sft import WeightAverage

STATE_FILE = "trainer_state.json"
WARM_START = "step_grpo_0"  # the SFT result: never pruned, so GRPO can be re-run from it
T = TypeVar("T")


class CheckpointError(McprlError, RuntimeError):
    """A checkpoint that could not be written (the previous one is left as it was) or read; names the file."""


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
    tinker: dict[str, Any] | None = None  # engine tinker: the server's state path (resume) and sampler path (export)

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
                    keep: int = 2, averaged: WeightAverage | None = None,
                    also: Callable[[Path], None] | None = None) -> Path:
    """`also(tmp)` writes further state into the checkpoint (PPO's critic)."""

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp / "model")  # a PEFT model writes only its adapter
        tokenizer.save_pretrained(tmp / "model")
        torch.save({"optimizer": optimizer.state_dict() if optimizer else None,
                    "scheduler": scheduler.state_dict() if scheduler else None,
                    "rng": rng_state(generators),
                    "averaged": averaged.state_dict() if averaged is not None else None}, tmp / "training.pt")
        if also is not None:
            also(tmp)

    return write_checkpoint(run_dir, state, write, keep)


def write_checkpoint(run_dir: Path, state: TrainState, write: Callable[[Path], None], keep: int = 2) -> Path:
    """`write(tmp)` fills a temporary directory (model/, training.pt), which then becomes
    step_<tag>/ beside its state file and the `latest` pointer; older checkpoints beyond `keep` go."""
    path = checkpoint_dir(run_dir, state)
    root, tmp = path.parent, path.parent / f".tmp_{state.tag}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        write(tmp)
        (tmp / STATE_FILE).write_text(json.dumps(asdict(state), indent=1))
        replaced = root / f".old_{state.tag}"
        if path.exists():  # the same tag again (step_done of a rerun): aside, then away once the new one is in
            shutil.rmtree(replaced, ignore_errors=True)
            path.rename(replaced)
        tmp.rename(path)
        shutil.rmtree(replaced, ignore_errors=True)
        pointer = root / "latest.tmp"
        pointer.write_text(path.name)
        os.replace(pointer, root / "latest")
    except Exception as err:  # noqa: BLE001 - a full disk: torch, safetensors and tokenizers each raise their own kind
        shutil.rmtree(tmp, ignore_errors=True)
        previous = (root / "latest").read_text().strip() if (root / "latest").is_file() else None
        kept = f"{root / previous} is still the latest" if previous else "no earlier checkpoint"
        raise CheckpointError(f"could not write checkpoint {path}: {_one_line(err)}; {kept}") from err
    kept = {p.resolve() for p in (path, root / WARM_START, *([Path(state.guard["checkpoint"])] if state.guard else []))}
    older = sorted((p for p in root.glob("step_*") if p.resolve() not in kept),
                   key=lambda p: p.stat().st_mtime)
    for old in older[:max(0, len(older) - (keep - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def checkpoint_dir(run_dir: Path, state: TrainState) -> Path:
    return Path(run_dir) / "checkpoints" / f"step_{state.tag}"


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint `latest` names; None before the first one. A pointer to no checkpoint is an error,
    not a fresh start: resuming from scratch would silently throw the run away."""
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.exists():
        return None
    name = _read(pointer, lambda f: f.read_text().strip())
    path = pointer.parent / name
    if not name.startswith("step_") or "/" in name or not (path / STATE_FILE).is_file():
        raise CheckpointError(f"checkpoint pointer {pointer} names {name!r}, which is no checkpoint there; "
                              "pass one with --resume-from RUN_DIR/checkpoints/step_<phase>_<N>")
    return path


def retire_latest(run_dir: Path) -> bool:
    """An older run's `latest` pointer goes when a new run starts in its directory (its checkpoints stay, for
    --resume-from): a `--resume` after a crash before the new run's first checkpoint starts it again instead of
    continuing the older run. Whether there was one."""
    pointer = Path(run_dir) / "checkpoints" / "latest"
    if not pointer.is_file():
        return False
    pointer.unlink()
    return True


def checked_checkpoint(path: Path) -> Path:
    """A checkpoint directory given by a user, or a ConfigError naming what is wrong with it."""
    from mcprl.errors import ConfigError

    if not (Path(path) / STATE_FILE).is_file():
        raise ConfigError(f"--resume-from {path}: not a checkpoint directory (no {STATE_FILE}); "
                          "checkpoints live in RUN_DIR/checkpoints/step_<phase>_<N>")
    return Path(path)


def load_weights(path: Path, model: PreTrainedModel) -> None:
    """Load a checkpoint's weights into `model` in place (adapter into a PEFT model, else full weights)."""
    from peft import PeftModel, set_peft_model_state_dict

    weights = Path(path) / "model"
    if isinstance(model, PeftModel):
        set_peft_model_state_dict(model, _read(weights / "adapter_model.safetensors", _load_tensors))
    else:
        files = sorted(weights.glob("*.safetensors"))
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(_read(f, _load_tensors))
        missing, _ = model.load_state_dict(state, strict=False)
        if [m for m in missing if "lm_head" not in m]:  # tied embeddings are not saved twice
            raise ValueError(f"checkpoint {path} lacks weights: {missing[:5]}")


def restore_policy(path: Path, model: PreTrainedModel, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """Weights and optimizer from a checkpoint (one saved without an optimizer state empties the optimizer's);
    returns the rest of its training state."""
    load_weights(path, model)
    extra = _read(Path(path) / "training.pt", lambda f: torch.load(f, weights_only=False))
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
    return _read(Path(path) / STATE_FILE, lambda f: TrainState(**json.loads(f.read_text())))


def _load_tensors(file: Path) -> dict[str, torch.Tensor]:
    return load_file(str(file))


def _read(file: Path, load: Callable[[Path], T]) -> T:
    """`load(file)`, any failure a one-line CheckpointError naming the file (each loader raises its own kind)."""
    try:
        return load(file)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {file} is missing") from None
    except Exception as err:  # noqa: BLE001 - json, pickle, zip, safetensors: corrupt reads raise anything
        raise CheckpointError(f"checkpoint file {file} is unreadable, truncated or corrupt ({_one_line(err)}); "
                              "resume from another one with --resume-from") from err


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300] or type(err).__name__
