"""PPO's critic: a value model, its loss and its update, for `algo.advantage_estimator: gae` (SkyRL's GAE).

The value model is a causal LM's backbone (the policy's base model unless `critic.model` names another) with
a linear head on the last hidden state, initialised to output zero, so the first advantages are the plain
discounted returns. A response token's value is read at the position before it (the state the token was
chosen in), as SkyRL's critic does, on exactly the masked tokens the policy trains on. The loss is SkyRL's
`ppo_critic_loss` (clipped around the values the advantages were computed from), with its own AdamW,
schedule and gradient clipping; it trains on every row of a step, zero-advantage ones included.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from mcprl._skyrl import AlgorithmConfig, ppo_critic_loss
from mcprl.errors import McprlError
from mcprl.models.loading import resolve_model
from mcprl.training.config import CriticConfig, LoraConfig, TrainConfig

CRITIC_FILE = "critic.pt"


class ValueModel(nn.Module):
    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """[B, T] values, one per position, in float32."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(hidden.to(self.head.weight.dtype)).squeeze(-1).float()


@dataclass
class Critic:
    model: ValueModel
    optimizer: torch.optim.Optimizer
    scheduler: Any
    cfg: CriticConfig

    def head_device(self) -> torch.device:
        return self.model.head.weight.device

    def trainable(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def save(self, directory: Path) -> None:
        """The trained weights (LoRA: the adapter and head; full: everything), optimizer and schedule."""
        weights = {k: v for k, v in self.model.state_dict(keep_vars=True).items() if v.requires_grad}
        torch.save({"weights": {k: v.detach().cpu() for k, v in weights.items()},
                    "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()},
                   directory / CRITIC_FILE)

    def load(self, checkpoint: Path) -> None:
        file = Path(checkpoint) / CRITIC_FILE
        if not file.is_file():
            raise McprlError(f"checkpoint {checkpoint} has no critic ({CRITIC_FILE}): it was not a PPO run")
        saved = torch.load(file, map_location="cpu", weights_only=False)
        missing = set(saved["weights"]) - set(self.model.state_dict())
        if missing:
            raise McprlError(f"{file}: weights of another critic ({sorted(missing)[:3]}...)")
        self.model.load_state_dict(saved["weights"], strict=False)
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])


def build_critic(cfg: TrainConfig, device: torch.device | None = None) -> Critic:
    """The critic `cfg.critic` describes, in float32 (a CPU trainer's master weights), on the policy's device."""
    causal = AutoModelForCausalLM.from_pretrained(resolve_model(cfg.critic.model or cfg.model.name),
                                                  dtype=torch.float32, local_files_only=True)
    return critic_on(causal, cfg.critic, device)


def critic_on(causal: nn.Module, c: CriticConfig, device: torch.device | None = None) -> Critic:
    """A critic over a loaded causal LM's backbone (its LM head is dropped)."""
    model = ValueModel(causal.base_model, causal.config.hidden_size)
    if c.mode == "lora":
        model.backbone = _lora(model.backbone, c.lora)
    if device is not None:
        model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=c.lr, weight_decay=0.0)
    warmup = max(1, c.lr_warmup_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))  # then constant
    return Critic(model, optimizer, scheduler, c)


def _lora(backbone: nn.Module, lora: LoraConfig) -> nn.Module:
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    targets: Any = "all-linear" if lora.target_modules == ["all-linear"] else list(lora.target_modules)
    return get_peft_model(backbone, PeftLoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                   target_modules=targets))


def response_values(critic: Critic, input_ids: list[list[int]], prompt_lens: list[int], loss_mask: torch.Tensor,
                    rows: list[int], pad_id: int, *, grad: bool = False) -> torch.Tensor:
    """[len(rows), R] values of the rows' response tokens (0 off the loss mask), each read at the position
    before its token."""
    width = max(len(input_ids[i]) for i in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for j, i in enumerate(rows):
        ids[j, :len(input_ids[i])] = torch.tensor(input_ids[i])
        attention[j, :len(input_ids[i])] = 1
    device = critic.head_device()
    with torch.set_grad_enabled(grad):
        values = critic.model(ids.to(device), attention.to(device))
    out = torch.zeros((len(rows), loss_mask.shape[1]), dtype=values.dtype, device=values.device)
    for j, i in enumerate(rows):
        p, n = prompt_lens[i], len(input_ids[i]) - prompt_lens[i]
        out[j, :n] = values[j, p - 1:p - 1 + n]
    return out * loss_mask[rows].to(out.device)


def values_for(critic: Critic, batch: Any, pad_id: int) -> torch.Tensor:
    """Every row's response values, without gradient, on the CPU beside the batch."""
    rows = list(range(batch.size))
    parts = [response_values(critic, batch.input_ids, batch.prompt_lens, batch.loss_mask,
                             rows[s:s + critic.cfg.micro_batch_size], pad_id).cpu()
             for s in range(0, len(rows), critic.cfg.micro_batch_size)]
    return torch.cat(parts)


def critic_update(critic: Critic, batch: Any, returns: torch.Tensor, old_values: torch.Tensor, pad_id: int, *,
                  epochs: int = 1) -> dict[str, float]:
    """`epochs` passes of the clipped value loss over every row, one optimizer step each; the metrics of the last."""
    config = AlgorithmConfig(value_clip=critic.cfg.value_clip)
    rows = list(range(batch.size))
    mask = batch.loss_mask
    critic.model.train()
    for _ in range(max(1, epochs)):
        loss_sum, clip_sum, n_chunks = 0.0, 0.0, 0
        fitted = []
        for start in range(0, len(rows), critic.cfg.micro_batch_size):
            chunk = rows[start:start + critic.cfg.micro_batch_size]
            values = response_values(critic, batch.input_ids, batch.prompt_lens, mask, chunk, pad_id, grad=True)
            device = values.device
            loss, clipfrac = ppo_critic_loss(values, old_values[chunk].to(device), returns[chunk].to(device), config,
                                             loss_mask=mask[chunk].to(device))
            (loss * len(chunk) / len(rows)).backward()
            loss_sum += loss.item() * len(chunk)
            clip_sum += (clipfrac or 0.0) * len(chunk)
            n_chunks += len(chunk)
            fitted.append(values.detach().cpu())
        grad_norm = float(torch.nn.utils.clip_grad_norm_(critic.trainable(), critic.cfg.grad_clip))
        critic.optimizer.step()
        critic.scheduler.step()
        critic.optimizer.zero_grad(set_to_none=True)
    values = torch.cat(fitted)
    return {"value_loss": loss_sum / max(n_chunks, 1), "values_mean": _masked_mean(old_values, mask),
            "returns_mean": _masked_mean(returns, mask), "explained_variance": explained_variance(old_values, returns, mask),
            "value_clip_frac": clip_sum / max(n_chunks, 1), "value_grad_norm": grad_norm,
            "value_lr": critic.scheduler.get_last_lr()[0], "fitted_explained_variance": explained_variance(values, returns, mask)}


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over the masked tokens: 1 is a perfect critic, 0 one no better
    than the mean, below 0 worse."""
    m = mask.bool()
    r, v = returns[m].double(), values[m].double()
    if r.numel() < 2 or float(r.var()) == 0.0:
        return 0.0
    return float(1.0 - (r - v).var() / r.var())


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))


def critic_plan(cfg: TrainConfig) -> str:
    """The dry run's critic line: model, mode, parameters trained and a memory estimate, read from the
    checkpoint's safetensors headers (no weights load)."""
    c = cfg.critic
    name = c.model or cfg.model.name
    try:
        shapes = _tensor_shapes(resolve_model(name))
    except (McprlError, OSError, ValueError) as exc:
        return f"{name} ({c.mode}): cannot read its weights ({exc})"
    backbone = sum(_numel(s) for k, s in shapes.items() if not k.startswith("lm_head"))
    if c.mode == "full":
        trained = backbone
    else:
        targets = set(c.lora.target_modules)
        trained = sum(c.lora.r * (s[0] + s[1]) for k, s in shapes.items()
                      if len(s) == 2 and k.endswith(".weight") and (k.split(".")[-2] in targets or "all-linear" in targets)
                      and not k.startswith("lm_head") and "embed" not in k)
    gib = (backbone * 4 + trained * 12) / 2**30  # fp32 weights, + gradient and two AdamW moments of what trains
    warm = f", {c.warmup_steps} critic-only steps first" if c.warmup_steps else ""
    clip = "off" if c.value_clip is None else f"{c.value_clip:g}"
    return (f"{name} ({c.mode}{f', r={c.lora.r}' if c.mode == 'lora' else ''}) + value head; {trained / 1e6:.1f}M "
            f"of {backbone / 1e6:.0f}M parameters trained, ~{gib:.1f} GiB; lr {c.lr:g}, value_clip {clip}, "
            f"GAE gamma {cfg.algo.gamma:g} lambda {cfg.algo.lambd:g}{warm}")


def _tensor_shapes(directory: Path) -> dict[str, list[int]]:
    import json
    import struct

    shapes: dict[str, list[int]] = {}
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise McprlError(f"no .safetensors in {directory}")
    for file in files:
        with open(file, "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        shapes |= {k: v["shape"] for k, v in header.items() if k != "__metadata__"}
    return {k.removeprefix("model."): v for k, v in shapes.items()}


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
