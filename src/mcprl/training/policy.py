"""The policy a run trains and evaluates: model (LoRA or full), tokenizer, rollout engine, episodes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from mcprl.training.checkpoint import CheckpointError
from mcprl.training.config import FinetuneConfig, TrainConfig, env_config, openenv_env_config, resolve_rollout_backend
from mcprl.models.devices import configure_threads, pick_device, pick_dtype
from mcprl.inference.engine import BatchingEngine, HFInferenceEngine, InferenceError
from mcprl.models.loading import load_model, resolve_model
from mcprl.training.rollout import Rollouts


@dataclass
class Policy:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    engine: BatchingEngine  # HF or vLLM (rollout.backend)
    rollouts: Rollouts
    bf16: bool  # train under bf16 autocast (fp32 master weights)

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]


def wrap_for_finetune(model: PreTrainedModel, finetune: FinetuneConfig) -> PreTrainedModel:
    if finetune.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if finetune.mode == "full":
        freeze_below_top(model, finetune.top_layers)
        return model
    lora = finetune.lora
    targets: Any = "all-linear" if lora.target_modules == ["all-linear"] else list(lora.target_modules)
    exclude = lora_excluded_layers(model.config.num_hidden_layers, finetune.top_layers)
    return get_peft_model(model, LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                            target_modules=targets, exclude_modules=exclude, task_type="CAUSAL_LM"))


def freeze_below_top(model: PreTrainedModel, top_layers: int | None) -> None:
    """Full fine-tune of the top layers only. The input embeddings freeze too (SmolLM2's LM head is the
    same tensor): a trainable embedding would carry gradient back through every layer."""
    layers = model.get_decoder().layers
    if top_layers is None or top_layers >= len(layers):
        return
    model.get_input_embeddings().requires_grad_(False)
    for layer in layers[:len(layers) - top_layers]:
        layer.requires_grad_(False)


def lora_excluded_layers(num_layers: int, top_layers: int | None) -> str | None:
    """peft's (and so SkyRL's) `exclude_modules` regex for every layer below the top `top_layers`."""
    if top_layers is None or top_layers >= num_layers:
        return None
    return rf".*\.layers\.({'|'.join(str(i) for i in range(num_layers - top_layers))})\..*"


def load_policy_weights(name_or_checkpoint: str, device: str = "auto") -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A model name (alias, HF id in cache, dir) or a training checkpoint (adapter or full weights)."""
    path = Path(name_or_checkpoint)
    weights = path / "model"
    adapter = weights / "adapter_config.json"
    if adapter.exists():
        base_name = json.loads(adapter.read_text())["base_model_name_or_path"]
        model, tokenizer = load_model(base_name, dtype="float32", device=device)
        peft_model = PeftModel.from_pretrained(model, weights)
        check_adapter_loaded(peft_model, weights)
        return peft_model, tokenizer
    if (weights / "config.json").exists():
        return load_model(str(weights), dtype="float32", device=device)
    return load_model(name_or_checkpoint, dtype="float32", device=device)


def adapter_modules(path: Path) -> list[str]:
    """The module names (q_proj, down_proj, ...) that a PEFT LoRA file holds weights for."""
    with safe_open(str(path), framework="pt") as f:
        return sorted({key.split(".lora_")[0].rsplit(".", 1)[-1] for key in f.keys() if ".lora_" in key})


def check_adapter_loaded(model: PeftModel, weights: Path) -> None:
    """PEFT loads an adapter file whose tensors match no module with a warning only, and the model then
    runs without them; here that is an error naming the modules left out."""
    file = weights / "adapter_model.safetensors"
    if not file.exists():
        return
    missing = sorted(set(adapter_modules(file)) - {name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                                                   if hasattr(module, "lora_A") and module.lora_A})
    if missing:
        raise CheckpointError(f"{file}: LoRA weights for {missing} match no adapted module; add them to "
                              f"target_modules in {weights / 'adapter_config.json'}")


def build_policy(cfg: TrainConfig, *, model: PreTrainedModel | None = None,
                 tokenizer: PreTrainedTokenizerBase | None = None) -> Policy:
    """fp32 master weights; rollouts and forward passes in bf16 where the hardware makes that fast."""
    configure_threads(cfg.model.threads)
    device = pick_device() if cfg.model.device == "auto" else torch.device(cfg.model.device)
    if model is None:
        model, tokenizer = load_model(cfg.model.name, dtype="float32", device=str(device))
        model = wrap_for_finetune(model, cfg.finetune)
    dtype = {"auto": pick_dtype(device), "bfloat16": torch.bfloat16, "float32": torch.float32}[cfg.model.dtype]
    max_batch_size = max(cfg.num_envs, cfg.eval.max_tasks or 0, 1)
    if resolve_rollout_backend(cfg) == "vllm":
        engine: BatchingEngine = _vllm_engine(cfg, model, tokenizer, dtype, max_batch_size)
    else:
        engine = HFInferenceEngine(model, tokenizer, dtype=dtype, seed=cfg.run.seed, max_batch_size=max_batch_size,
                                   max_wait_ms=cfg.rollout.batch_max_wait_ms)
    return Policy(model, tokenizer, engine, rollouts_for(cfg, engine, tokenizer), bf16=dtype == torch.bfloat16)


def rollouts_for(cfg: TrainConfig, engine: BatchingEngine, tokenizer: PreTrainedTokenizerBase) -> Rollouts:
    """Episodes as the config's rollout section says, over any inference engine."""
    r = cfg.rollout
    return Rollouts(engine, tokenizer, env_config=env_config(cfg), max_turns=r.max_turns,
                    max_input_length=r.max_input_length, max_new_tokens=r.max_new_tokens,
                    overlong_filter=r.overlong_filter, openenv_config=openenv_env_config(cfg))


def _vllm_engine(cfg: TrainConfig, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, dtype: torch.dtype,
                 max_batch_size: int) -> BatchingEngine:
    """vLLM on the base checkpoint, following the trainer's adapter (saved under RUN_DIR/vllm_adapters)."""
    from mcprl.inference.vllm_engine import LoraSyncCallback, VLLMInferenceEngine

    if not isinstance(model, PeftModel):
        raise InferenceError("rollout.backend=vllm follows a LoRA adapter and this model has none; "
                             "use rollout.backend: hf for full fine-tuning")
    adapter = model.peft_config["default"]
    r = cfg.rollout.vllm
    engine = VLLMInferenceEngine(resolve_model(adapter.base_model_name_or_path), tokenizer,
                                 dtype=str(dtype).removeprefix("torch."), max_model_len=r.max_model_len,
                                 max_lora_rank=adapter.r, gpu_memory_utilization=r.gpu_memory_utilization,
                                 enforce_eager=r.enforce_eager, seed=cfg.run.seed, max_batch_size=max_batch_size,
                                 max_wait_ms=cfg.rollout.batch_max_wait_ms)
    engine.weight_sync = LoraSyncCallback(model, engine, Path(cfg.run.output_dir) / "vllm_adapters")
    return engine
