"""Per-token log-probabilities of chosen tokens, for SFT and GRPO alike.

The LM head (vocab 49k for SmolLM2) is the costliest single layer on CPU; it runs only at the
positions a loss reads (the model's own tokens), not over prompts and tool outputs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel


@dataclass
class TokenStats:
    logprobs: torch.Tensor  # [N] log p(chosen token) at the selected positions
    entropy: torch.Tensor | None  # [N] entropy of the predictive distribution there (no grad)


def autocast_for(model: PreTrainedModel, enabled: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on CPUs with AMX / GPUs with bf16; fp32 master weights stay in the optimizer."""
    device = next(model.parameters()).device.type
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device, dtype=torch.bfloat16)


def _base_and_head(model: PreTrainedModel) -> tuple[torch.nn.Module, torch.nn.Module]:
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.model, inner.lm_head


def detachable_prefix(select: torch.Tensor) -> int:
    """Positions before every row's first selected token, less the one that predicts it: the prompt
    part a forward pass may encode without gradient (`detached_prefix` below)."""
    firsts = [int(row.nonzero()[0]) if row.any() else select.shape[1] for row in select]
    return max(0, min(firsts, default=1) - 1)


def selected_token_logprobs(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            select: torch.Tensor, *, temperature: float = 1.0, bf16: bool = False,
                            with_entropy: bool = False, detached_prefix: int = 0) -> TokenStats:
    """Log p(input_ids[b, t] | input_ids[b, :t]) for every (b, t) with select[b, t] true.

    Rows are right-padded; position t is predicted from the hidden state at t - 1. Inputs move to the
    model's device; the results stay there. `temperature`
    divides the logits as the sampler did, so ratios compare like with like. The first
    `detached_prefix` positions (real tokens in every row, none selected) are encoded once without
    gradient and reach the rest only through their keys and values: a cheaper backward pass whose
    gradient omits the prefix's own activations. Under gradient checkpointing the whole row is encoded
    with gradient instead: checkpointed layers drop a past-key-values cache (recomputing a layer would
    append to it twice), so there is no prefix to reuse.
    """
    base, head = _base_and_head(model)
    device = head.weight.device
    input_ids, attention_mask, select = input_ids.to(device), attention_mask.to(device), select.to(device)
    checkpointing = base.training and bool(getattr(base, "is_gradient_checkpointing", False))
    p = 0 if checkpointing else detached_prefix
    if p and bool(select[:, :p + 1].any()):
        raise ValueError(f"a selected token lies in the detached prefix of {p} positions")
    with autocast_for(model, bf16):
        cache = None
        if p:
            with torch.no_grad():
                cache = base(input_ids=input_ids[:, :p], attention_mask=attention_mask[:, :p],
                             use_cache=True).past_key_values
        hidden = base(input_ids=input_ids[:, p:], attention_mask=attention_mask, past_key_values=cache,
                      use_cache=cache is not None).last_hidden_state  # [B, T - p, H]
        prev = select[:, p + 1:]  # targets at t >= p + 1
        h = hidden[:, :-1][prev]  # [N, H] states that predict the selected tokens
        logits = head(h).float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, p + 1:][prev]
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp.exp() * logp).sum(-1)
    return TokenStats(chosen, entropy)
