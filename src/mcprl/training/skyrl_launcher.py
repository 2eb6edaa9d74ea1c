"""`mcprl train --engine skyrl`: the same TrainConfig, trained by SkyRL's distributed trainer
(Ray + FSDP + vLLM) instead of the embedded one.

1. the datasets are written as parquet under RUN_DIR/skyrl/data (SkyRL's loader reads it);
2. the config becomes SkyRL `key=value` overrides, with our env's settings under
   `environment.skyrl_gym.mcp_tool_env` (a field SkyRL's own config lacks: see `MCPSkyRLTrainConfig`);
3. SkyRL builds its config from them and checks it with its own `validate_cfg`;
4. `skyrl_entrypoint.run` starts Ray and trains.

Steps 2-3 run anywhere, without Ray or a model (`--dry-run`); step 4 needs CUDA GPUs and vLLM.
"""

# No `from __future__ import annotations`: SkyRL builds nested configs from the real field types.
import importlib.util
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mcprl._skyrl import EnvironmentConfig, SkyRLTrainConfig, validate_cfg
from mcprl.data.sample import read_samples, write_samples
from mcprl.envs import ENV_ID, OPENENV_ID
from mcprl.envs.config import EnvConfig
from mcprl.errors import ConfigError
from mcprl.training.callbacks import wandb_run_id
from mcprl.training.config import CRITIC_ESTIMATORS, TrainConfig, env_config, openenv_env_config, resolve_wandb_mode
from mcprl.training.skyrl_gym_config import MCPSkyRLGymConfig

_SCHEDULERS = {"constant": "constant_with_warmup", "cosine": "cosine"}
_PLAIN = re.compile(r"[A-Za-z/][\w./@:+\-]*")


class LaunchError(ConfigError):
    """The machine cannot run SkyRL's trainer (no GPU, no vLLM); the message says what is missing."""


@dataclass
class MCPEnvironmentConfig(EnvironmentConfig):
    env_class: str = ENV_ID
    skyrl_gym: MCPSkyRLGymConfig = field(default_factory=MCPSkyRLGymConfig)


@dataclass
class MCPSkyRLTrainConfig(SkyRLTrainConfig):
    environment: MCPEnvironmentConfig = field(default_factory=MCPEnvironmentConfig)


@dataclass
class SkyRLPlan:
    """What a SkyRL run will get: its overrides, the parquet files, env vars for Ray, and notes."""

    overrides: list[str]
    run_dir: Path
    train_data: Path
    eval_data: Path | None
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def plan(cfg: TrainConfig, *, resume: bool = False, prepare: bool = False) -> SkyRLPlan:
    """The overrides for `cfg`; with `prepare`, also write the parquet datasets (else only count rows)."""
    _check_supported(cfg)
    run_dir = Path(cfg.run.output_dir).resolve()
    work = run_dir / "skyrl"
    notes: list[str] = []
    gen = cfg.data.generate
    train, n_train = _dataset(cfg.data.train, "data.train", work / "data" / "train.parquet", assumed=gen.n_train,
                              limit=None, prepare=prepare, notes=notes)
    if n_train < cfg.algo.prompts_per_step:
        raise ConfigError(f"data.train has {n_train} tasks, fewer than "
                          f"algo.prompts_per_step={cfg.algo.prompts_per_step}; SkyRL needs at least one full batch")
    eval_data, n_eval = None, 0
    if cfg.eval.before or cfg.eval.after_grpo:
        eval_data, n_eval = _dataset(cfg.data.eval, "data.eval", work / "data" / "eval.parquet", assumed=gen.n_eval,
                                     limit=cfg.eval.max_tasks, prepare=prepare, notes=notes)
    logger, env = _logger(cfg, run_dir, notes, resume=resume, prepare=prepare)
    values = {
        **_data_overrides(train, eval_data),
        **_trainer_overrides(cfg, work, n_train=n_train, n_eval=n_eval, has_eval=eval_data is not None,
                             resume=resume, logger=logger, prepare=prepare),
        **_generator_overrides(cfg),
        **_environment_overrides(cfg, notes),
    }
    overrides = [format_override(k, v) for k, v in values.items()] + list(cfg.skyrl.overrides)
    return SkyRLPlan(overrides, run_dir, train, eval_data, env, notes)


def build_skyrl_config(overrides: list[str]) -> MCPSkyRLTrainConfig:
    """SkyRL's own config object from the overrides, checked by SkyRL's `validate_cfg` (no Ray, no GPU)."""
    try:
        skyrl_cfg = MCPSkyRLTrainConfig.from_cli_overrides(overrides)
        EnvConfig.from_any(skyrl_cfg.environment.skyrl_gym.mcp_tool_env)
        validate_cfg(skyrl_cfg)
    except (AssertionError, ValueError, TypeError) as err:
        raise ConfigError(f"SkyRL rejects the configuration: {_one_line(err)}") from None
    return skyrl_cfg


def dry_run(cfg: TrainConfig, *, resume: bool = False) -> str:
    """The overrides a run would use, after SkyRL validated them; writes nothing, starts nothing."""
    p = plan(cfg, resume=resume, prepare=False)
    build_skyrl_config(p.overrides)
    lines = ["SkyRL overrides (accepted by SkyRL's validate_cfg):", *(f"  {o}" for o in p.overrides)]
    lines += [f"note: {n}" for n in p.notes]
    return "\n".join(lines)


def launch(cfg: TrainConfig, *, resume: bool = False) -> None:
    """Write the datasets, validate, start Ray and train (blocks until SkyRL's trainer finishes)."""
    missing = _missing_runtime()
    if missing:
        raise LaunchError(f"--engine skyrl needs {missing}; check the plan here with --dry-run and run on a GPU "
                          f"machine with skyrl[fsdp] installed (docs/training.md)")
    p = plan(cfg, resume=resume, prepare=True)
    skyrl_cfg = build_skyrl_config(p.overrides)
    os.environ.update(p.env)
    from mcprl.training.skyrl_entrypoint import run

    run(skyrl_cfg, cfg, p.run_dir)


def format_override(key: str, value: Any) -> str:
    """`key=value` that SkyRL's parser (OmegaConf, YAML values) reads back as exactly `value`."""
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str) and _PLAIN.fullmatch(value) and yaml.safe_load(value) == value:
        return f"{key}={value}"
    return f"{key}={json.dumps(value, separators=(',', ':'))}"


def _check_supported(cfg: TrainConfig) -> None:
    if cfg.sft.enabled:
        raise ConfigError("sft.enabled=true: SkyRL's trainer runs GRPO only; set sft.enabled: false (run SFT with "
                          "--engine embedded first and point model.name at its checkpoint)")
    if cfg.rollout.backend == "hf":
        raise ConfigError("rollout.backend=hf: SkyRL's trainer generates with vLLM only; use backend: vllm or auto")
    x = cfg.experimental
    for on, setting, fix in (
            (x.probe.per_family != 0, f"probe.per_family={x.probe.per_family}",
             "set it to 0, or pass SkyRL a data.train that holds the families to train on"),
            (x.guard.every != 0, f"guard.every={x.guard.every}",
             "set it to 0 (SkyRL's ckpt_interval and eval_interval keep checkpoints to choose from)"),
            (x.expert_guidance, "expert_guidance=true", "set it to false"),
            (x.negative_weight != 1.0, f"negative_weight={x.negative_weight}", "set it to 1.0"),
            (x.credit != "episode", f"credit={x.credit}", "set it to episode"),
            (x.grpo_detach != "none", f"grpo_detach={x.grpo_detach}", "set it to none (SkyRL's gradient is exact)")):
        if on:
            raise ConfigError(f"experimental.{setting} runs in the embedded trainer only; {fix} for SkyRL's trainer")
    if cfg.algo.advantage_estimator in CRITIC_ESTIMATORS and cfg.critic.warmup_steps:
        raise ConfigError(f"critic.warmup_steps={cfg.critic.warmup_steps}: SkyRL's trainer has no critic-only steps; "
                          "set 0 (the embedded trainer runs them)")
    if cfg.finetune.mode == "full" and cfg.finetune.top_layers is not None:
        raise ConfigError(f"finetune.top_layers={cfg.finetune.top_layers} with mode full: SkyRL's trainer fine-tunes "
                          "every weight; set top_layers: null, or use mode lora (adapters on the top layers)")


def _dataset(source: str, key: str, target: Path, *, assumed: int, limit: int | None, prepare: bool,
             notes: list[str]) -> tuple[Path, int]:
    """(parquet path, rows); a dry run tolerates a missing file and assumes data.generate's count."""
    path = Path(source)
    if not path.is_file():
        if prepare:
            raise ConfigError(f"{key}={source} does not exist; generate the tasks first (`mcprl data generate`, "
                              f"scripts/generate_dataset.sh) or point {key} at a .jsonl/.json/.parquet file")
        notes.append(f"{key}={source} does not exist yet; its size is taken from data.generate")
        return target, min(assumed, limit) if limit else assumed
    try:
        samples = read_samples(path)
    except (ValueError, KeyError) as err:
        raise ConfigError(f"{key}={source} cannot be read: {_one_line(err)}") from None
    samples = samples[:limit] if limit else samples
    if prepare:
        write_samples(samples, target)
    return target, len(samples)


def _logger(cfg: TrainConfig, run_dir: Path, notes: list[str], *, resume: bool,
            prepare: bool) -> tuple[str, dict[str, str]]:
    """SkyRL's tracker backend and env vars for it. SkyRL's validate_cfg insists on WANDB_API_KEY for wandb.
    Online, W&B's own variables give SkyRL's `wandb.init` the run id, so `--resume` continues the directory's run
    as the embedded engine's does (callbacks.WandbCallback); the id is recorded when the run is prepared."""
    mode = resolve_wandb_mode(cfg.logging.wandb)
    if mode != "disabled" and os.environ.get("WANDB_API_KEY"):
        if mode == "offline":
            return "wandb", {"WANDB_MODE": "offline"}
        run_id, resuming = wandb_run_id(run_dir, resume, record=prepare)
        return "wandb", {"WANDB_RUN_ID": run_id, **({"WANDB_RESUME": "allow"} if resuming else {})}
    if mode != "disabled":
        sink = "tensorboard" if cfg.logging.tensorboard else "the console"
        notes.append(f"W&B is {mode} but SkyRL's tracker needs WANDB_API_KEY; SkyRL logs to {sink} "
                     f"(metrics.jsonl is written either way)")
    if cfg.logging.tensorboard:
        return "tensorboard", {"TENSORBOARD_DIR": str(run_dir / "tensorboard")}
    return "console", {}


def _data_overrides(train: Path, eval_data: Path | None) -> dict[str, Any]:
    return {"data.train_data": [str(train)], "data.val_data": [str(eval_data)] if eval_data else []}


def _trainer_overrides(cfg: TrainConfig, work: Path, *, n_train: int, n_eval: int, has_eval: bool, resume: bool,
                       logger: str, prepare: bool) -> dict[str, Any]:
    a, s, lora, w = cfg.algo, cfg.skyrl, cfg.finetune.lora, cfg.logging.wandb
    lora_on = cfg.finetune.mode == "lora"
    steps_per_epoch = n_train // a.prompts_per_step
    kl_on = a.kl_coef > 0
    model_path = _model_path(cfg.model.name, prepare)
    values: dict[str, Any] = {
        "trainer.policy.model.path": model_path,
        "trainer.policy.model.lora.rank": lora.r if lora_on else 0,
        "trainer.policy.model.lora.alpha": lora.alpha,
        "trainer.policy.model.lora.dropout": lora.dropout,
        "trainer.policy.model.lora.target_modules":
            lora.target_modules[0] if lora.target_modules == ["all-linear"] else lora.target_modules,
        "trainer.policy.model.lora.exclude_modules":
            _lora_exclude(model_path, cfg.finetune.top_layers) if lora_on else None,
        "trainer.policy.model.lora.lora_sync_path": str(work / "lora_sync"),
        "trainer.policy.optimizer_config.lr": a.lr,
        "trainer.policy.optimizer_config.weight_decay": a.weight_decay,
        "trainer.policy.optimizer_config.max_grad_norm": a.grad_clip,
        "trainer.policy.optimizer_config.num_warmup_steps": a.warmup_steps,
        "trainer.policy.optimizer_config.scheduler": _SCHEDULERS[a.lr_scheduler],
        "trainer.strategy": s.strategy,
        "trainer.placement.colocate_all": s.colocate_all,
        "trainer.placement.policy_num_nodes": s.num_nodes,
        "trainer.placement.policy_num_gpus_per_node": s.gpus_per_node,
        "trainer.placement.ref_num_nodes": s.num_nodes,
        "trainer.placement.ref_num_gpus_per_node": s.gpus_per_node,
        "trainer.algorithm.advantage_estimator": a.advantage_estimator,
        "trainer.algorithm.policy_loss_type": a.policy_loss,
        "trainer.algorithm.loss_reduction": a.loss_reduction,
        "trainer.algorithm.grpo_norm_by_std": a.grpo_norm_by_std,
        "trainer.algorithm.eps_clip_low": a.eps_clip_low,
        "trainer.algorithm.eps_clip_high": a.eps_clip_high,
        "trainer.algorithm.clip_ratio_c": a.clip_ratio_c,
        "trainer.algorithm.use_kl_loss": kl_on and a.use_kl_loss,
        "trainer.algorithm.use_kl_in_reward": kl_on and not a.use_kl_loss,
        "trainer.algorithm.kl_loss_coef": a.kl_coef,
        "trainer.algorithm.kl_estimator_type": a.kl_estimator,
        "trainer.algorithm.dynamic_sampling.type": a.dynamic_sampling.type,
        "trainer.algorithm.dynamic_sampling.max_sample_batches": a.dynamic_sampling.max_sample_batches,
        "trainer.algorithm.dynamic_sampling.min_replace_ratio": a.dynamic_sampling.min_replace_ratio,
        "trainer.epochs": math.ceil(a.steps / max(steps_per_epoch, 1)),
        "trainer.max_training_steps": a.steps,
        "trainer.update_epochs_per_batch": a.epochs,
        "trainer.train_batch_size": a.prompts_per_step,
        "trainer.policy_mini_batch_size": a.prompts_per_step,
        "trainer.micro_train_batch_size_per_gpu": a.micro_batch_size,
        "trainer.micro_forward_batch_size_per_gpu": a.micro_batch_size,
        "trainer.max_prompt_length": cfg.rollout.max_input_length,
        "trainer.gradient_checkpointing": cfg.finetune.gradient_checkpointing,
        "trainer.bf16": cfg.model.dtype != "float32",
        "trainer.seed": cfg.run.seed,
        "trainer.ckpt_path": str(work / "ckpts"),
        "trainer.export_path": str(work / "exports"),
        "trainer.log_path": str(work / "logs"),
        "trainer.ckpt_interval": a.save_every or a.steps,
        "trainer.hf_save_interval": a.save_every or a.steps,
        "trainer.resume_mode": "latest" if resume else "none",
        "trainer.eval_before_train": cfg.eval.before,
        "trainer.eval_interval": a.steps if has_eval else -1,
        "trainer.eval_batch_size": max(n_eval, 1),
        "trainer.project_name": w.project,
        "trainer.run_name": cfg.run.name,
        "trainer.logger": logger,
        "trainer.tags": list(w.tags) or None,
    }
    if a.loss_reduction == "seq_mean_token_sum_norm":
        values["trainer.algorithm.max_seq_len"] = cfg.rollout.vllm.max_model_len
    if a.advantage_estimator in CRITIC_ESTIMATORS:
        values |= _critic_overrides(cfg, model_path if cfg.critic.model is None else _model_path(cfg.critic.model,
                                                                                                 prepare))
    return values


def _critic_overrides(cfg: TrainConfig, critic_path: str) -> dict[str, Any]:
    """The `critic` section as SkyRL's trainer.critic (its value head is SkyRL's own), GAE's gamma and lambda."""
    c, a, s = cfg.critic, cfg.algo, cfg.skyrl
    lora_on = c.mode == "lora"
    return {
        "trainer.critic.model.path": critic_path,
        "trainer.critic.model.lora.rank": c.lora.r if lora_on else 0,
        "trainer.critic.model.lora.alpha": c.lora.alpha,
        "trainer.critic.model.lora.target_modules":
            c.lora.target_modules[0] if c.lora.target_modules == ["all-linear"] else c.lora.target_modules,
        "trainer.critic.optimizer_config.lr": c.lr,
        "trainer.critic.optimizer_config.max_grad_norm": c.grad_clip,
        "trainer.critic.optimizer_config.num_warmup_steps": c.lr_warmup_steps,
        "trainer.critic_mini_batch_size": a.prompts_per_step,
        "trainer.placement.critic_num_nodes": s.num_nodes,
        "trainer.placement.critic_num_gpus_per_node": s.gpus_per_node,
        "trainer.algorithm.gamma": a.gamma,
        "trainer.algorithm.lambd": a.lambd,
        "trainer.algorithm.value_clip": c.value_clip,
    }


def _generator_overrides(cfg: TrainConfig) -> dict[str, Any]:
    r, s = cfg.rollout, cfg.skyrl
    stop = ["</tool_call>", f"</{EnvConfig().answer_tag}>"]
    engines = s.num_inference_engines or max(s.num_nodes * s.gpus_per_node // s.tensor_parallel_size, 1)
    return {
        "generator.n_samples_per_prompt": cfg.algo.group_size,
        "generator.max_turns": r.max_turns,
        "generator.max_input_length": r.max_input_length,
        "generator.apply_overlong_filtering": r.overlong_filter,
        "generator.sampling_params.max_generate_length": r.max_new_tokens,
        "generator.sampling_params.temperature": r.temperature,
        "generator.sampling_params.top_p": r.top_p,
        "generator.sampling_params.top_k": r.top_k,
        "generator.sampling_params.stop": stop,
        "generator.eval_sampling_params.max_generate_length": r.max_new_tokens,
        "generator.eval_sampling_params.temperature": cfg.eval.temperature,
        "generator.eval_sampling_params.stop": stop,
        "generator.eval_n_samples_per_prompt": cfg.eval.n_samples,
        "generator.inference_engine.backend": "vllm",
        "generator.inference_engine.model_dtype": "float32" if cfg.model.dtype == "float32" else "bfloat16",
        "generator.inference_engine.num_engines": engines,
        "generator.inference_engine.tensor_parallel_size": s.tensor_parallel_size,
        "generator.inference_engine.gpu_memory_utilization": r.vllm.gpu_memory_utilization,
        "generator.inference_engine.enforce_eager": r.vllm.enforce_eager,
        "generator.inference_engine.engine_init_kwargs.max_model_len": r.vllm.max_model_len,
    }


def _environment_overrides(cfg: TrainConfig, notes: list[str]) -> dict[str, Any]:
    """EnvConfig fields from the training config; Ray workers start elsewhere, so paths become absolute."""
    env = {f"environment.skyrl_gym.{ENV_ID}.{k}": v for k, v in env_config(cfg, absolute_paths=True).items()}
    openenv = {f"environment.skyrl_gym.{OPENENV_ID}.{k}": v for k, v in openenv_env_config(cfg).items()}
    return {"environment.env_class": ENV_ID, **env, **openenv}


def _model_path(name: str, prepare: bool) -> str:
    """A local directory for the default alias or a local path; a Hub id as is (SkyRL downloads it)."""
    from mcprl.models import loading as model

    if name == model.DEFAULT_MODEL:
        return str(model.ensure_default_model() if prepare else model.converted_model_dir())
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        return str(path.resolve())
    return name


def _lora_exclude(model_path: str, top_layers: int | None) -> str | None:
    """`finetune.top_layers` as SkyRL's `exclude_modules` (it has no layer selection of its own)."""
    if top_layers is None:
        return None
    from transformers import AutoConfig

    from mcprl.training.policy import lora_excluded_layers

    try:
        depth = AutoConfig.from_pretrained(model_path, local_files_only=True).num_hidden_layers
    except OSError as exc:
        raise ConfigError(f"finetune.top_layers needs the model's config.json locally to count its layers "
                          f"({model_path}: {exc}); fetch the model once or set top_layers: null") from exc
    return lora_excluded_layers(depth, top_layers)


def _missing_runtime() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vLLM (pip install 'skyrl[fsdp]')"
    import torch

    if not torch.cuda.is_available():
        return "CUDA GPUs (none is visible)"
    return None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__
