"""SkyRL's distributed trainer (Ray, FSDP, vLLM) on the same env and data (`mcprl.training.skyrl_launcher`)."""

from __future__ import annotations

from mcprl.errors import ConfigError
from mcprl.training.config import TrainConfig, describe
from mcprl.training.engines.base import RunRequest, critic_lines


class SkyRLEngine:
    name = "skyrl"

    def plan(self, cfg: TrainConfig, request: RunRequest) -> str:
        from mcprl.training import skyrl_launcher

        self._check(request)
        return describe(cfg, "skyrl", lines=critic_lines(cfg)) + "\n" + skyrl_launcher.dry_run(cfg, resume=request.resume)

    def run(self, cfg: TrainConfig, request: RunRequest) -> None:
        from mcprl.training import skyrl_launcher

        self._check(request)
        skyrl_launcher.launch(cfg, resume=request.resume)

    @staticmethod
    def _check(request: RunRequest) -> None:
        if request.resume_from is not None:
            raise ConfigError("--resume-from: SkyRL's trainer resumes from its own latest checkpoint; use --resume")
        if request.sft_only:
            raise ConfigError("--sft-only: SkyRL's trainer runs GRPO only; use --engine embedded for SFT")
