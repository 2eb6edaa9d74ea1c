"""The Tinker API (hosted Tinker, a SkyRL cluster's Tinker server, or SkyRL's server started on this
machine) on the same env, data, evals and report (`mcprl.training.tinker.run`)."""

from __future__ import annotations

from mcprl.errors import ConfigError
from mcprl.training.config import TrainConfig, describe
from mcprl.training.engines.base import RunRequest


class TinkerEngine:
    name = "tinker"

    def plan(self, cfg: TrainConfig, request: RunRequest) -> str:
        from mcprl.training.tinker import run

        run.check(cfg)
        self._check(request)
        t = cfg.tinker
        lora = f"lora (r={run.lora_rank(cfg)}, on the server)"
        loss, loss_config = run.loss_for(cfg.algo)
        where = ("local: SkyRL's Tinker server started for the run (JAX, CPU), 127.0.0.1, state in "
                 f"{cfg.run.output_dir}/tinker" if t.base_url == run.LOCAL else f"{t.base_url} (key from ${t.api_key_env})")
        server = (f"{where}; model {t.model or cfg.model.name}; loss {loss}{' ' + str(loss_config) if loss_config else ''}, "
                  f"reduction {run.server_reduction(cfg)}; sft cross_entropy on the demos' assistant tokens; evals "
                  + ("here, on the exported adapters" if run.eval_here(cfg) else "on the Tinker sampler"))
        return describe(cfg, "tinker", request.sft_only, lines={
            "finetune": lora, "rollout": f"tinker sampler (SkyRL's generator over it); {cfg.num_envs} envs, "
            f"{cfg.rollout.max_turns} turns x {cfg.rollout.max_new_tokens} tokens, T={cfg.rollout.temperature}",
            "tinker": server, **({"ignored": "; ".join(run.ignored(cfg))} if run.ignored(cfg) else {})})

    def run(self, cfg: TrainConfig, request: RunRequest) -> None:
        from mcprl.training.checkpoint import checked_checkpoint
        from mcprl.training.tinker import run

        self._check(request)
        resume_from = checked_checkpoint(request.resume_from) if request.resume_from is not None else None
        run.train(cfg, resume=request.resume, resume_from=resume_from, sft_only=request.sft_only)

    @staticmethod
    def _check(request: RunRequest) -> None:
        if request.resume and request.resume_from is not None:
            raise ConfigError("--resume and --resume-from: pass one")
