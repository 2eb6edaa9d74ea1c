"""mcprl's own trainer: SFT then GRPO in one process, on a CPU or one GPU (`mcprl.training.trainer`)."""

from __future__ import annotations

from mcprl.training.config import TrainConfig, describe, resolve_rollout_backend
from mcprl.training.engines.base import RunRequest, critic_lines


class EmbeddedEngine:
    name = "embedded"

    def plan(self, cfg: TrainConfig, request: RunRequest) -> str:
        return describe(cfg, "embedded", request.sft_only, lines=critic_lines(cfg))

    def run(self, cfg: TrainConfig, request: RunRequest) -> None:
        resolve_rollout_backend(cfg)  # an impossible backend fails before any model loads
        resume_from = request.resume_from
        if resume_from is not None:
            from mcprl.training.checkpoint import checked_checkpoint

            resume_from = checked_checkpoint(resume_from)
        from mcprl.training.trainer import train

        train(cfg, resume=request.resume, resume_from=resume_from, sft_only=request.sft_only)
