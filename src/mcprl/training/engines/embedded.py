"""mcprl's own trainer: SFT then GRPO in one process, on a CPU or one GPU (`mcprl.training.trainer`)."""

from __future__ import annotations

from pathlib import Path

from mcprl.training.config import TrainConfig, describe, resolve_rollout_backend
from mcprl.training.engines.base import RunRequest, critic_lines


class EmbeddedEngine:
    name = "embedded"

    def plan(self, cfg: TrainConfig, request: RunRequest) -> str:
        return describe(cfg, "embedded", request.sft_only, lines=critic_lines(cfg))

    def run(self, cfg: TrainConfig, request: RunRequest) -> None:
        resolve_rollout_backend(cfg)  # an impossible backend fails before any model loads
        from mcprl.training.checkpoint import checked_checkpoint, latest_checkpoint, read_state

        resume_from = None if request.resume_from is None else checked_checkpoint(request.resume_from)
        checkpoint = resume_from or (latest_checkpoint(Path(cfg.run.output_dir)) if request.resume else None)
        if checkpoint is not None:
            read_state(checkpoint)  # a broken checkpoint fails in seconds, before the trainer's imports (~5 s)
        from mcprl.training.trainer import train

        train(cfg, resume=request.resume, resume_from=resume_from, sft_only=request.sft_only)
