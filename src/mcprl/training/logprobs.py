"""Per-token log-probabilities of chosen tokens, for SFT and GRPO alike.

The LM head (vocab 49k for SmolLM2) is the costliest single layer on CPU; it runs only at the
positions a loss reads (the model's own tokens), not over prompts and tool outputs. `detach` chooses
how much of the rest the backward pass runs through.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers.cache_utils import DynamicLayer

from mcprl.training.config import Detach


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
    part a forward pass may encode without gradient (`detach="prompt"` below)."""
    firsts = [int(row.nonzero()[0]) if row.any() else select.shape[1] for row in select]
    return max(0, min(firsts, default=1) - 1)


def selected_token_logprobs(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            select: torch.Tensor, *, temperature: float = 1.0, bf16: bool = False,
                            with_entropy: bool = False, detach: Detach = "none") -> TokenStats:
    """Log p(input_ids[b, t] | input_ids[b, :t]) for every (b, t) with select[b, t] true.

    Rows are right-padded; position t is predicted from the hidden state at t - 1. Inputs move to the
    model's device; the results stay there. `temperature` divides the logits as the sampler did, so
    ratios compare like with like. Every `detach` gives the same logprobs; they differ in the gradient:
    `none` is exact; `prompt` encodes the positions before every row's first selected token once without
    gradient (the rest reaches them through their keys and values); `context` gives gradient only to the
    positions that predict a selected token, so a prompt or tool result anywhere in the row is a constant
    the model's own turns attend to (`_context_detached_states`). Under gradient checkpointing every row
    is encoded with gradient: checkpointed layers drop a past-key-values cache (recomputing a layer would
    append to it twice), and both cheaper forms need one.
    """
    base, head = _base_and_head(model)
    device = head.weight.device
    input_ids, attention_mask, select = input_ids.to(device), attention_mask.to(device), select.to(device)
    if base.training and bool(getattr(base, "is_gradient_checkpointing", False)):
        detach = "none"
    with autocast_for(model, bf16):
        if detach == "context":
            h = _context_detached_states(base, input_ids, attention_mask, select)
        else:
            h = _prefix_detached_states(base, input_ids, attention_mask, select,
                                        detachable_prefix(select) if detach == "prompt" else 0)
        logits = head(h).float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, 1:][select[:, 1:]]
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp.exp() * logp).sum(-1)
    return TokenStats(chosen, entropy)


def _prefix_detached_states(base: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            select: torch.Tensor, p: int) -> torch.Tensor:
    """[N, H] states that predict the selected tokens, the first `p` positions encoded without gradient."""
    cache = None
    if p:
        with torch.no_grad():
            cache = base(input_ids=input_ids[:, :p], attention_mask=attention_mask[:, :p],
                         use_cache=True).past_key_values
    hidden = base(input_ids=input_ids[:, p:], attention_mask=attention_mask, past_key_values=cache,
                  use_cache=cache is not None).last_hidden_state  # [B, T - p, H]
    return hidden[:, :-1][select[:, p + 1:]]


class _TrainedOverConstant(DynamicLayer):
    """One layer's keys and values from a pass without gradient over whole rows, with the positions that
    train written over by their own (out of place, so the gradient reaches them): the trained positions
    attend to each other with gradient and to every other position as a constant."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, positions: torch.Tensor):
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self.keys, self.values, self.positions = keys, values, positions

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        index = self.positions[:, None, :, None].expand(-1, key_states.shape[1], -1, key_states.shape[-1])
        return self.keys.scatter(2, index, key_states), self.values.scatter(2, index, value_states)


def _context_detached_states(base: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                             select: torch.Tensor) -> torch.Tensor:
    """[N, H] states that predict the selected tokens, with gradient through those positions only.

    A multi-turn demo is mostly prompt and tool results (~500 of ~620 tokens in the quickstart's demos),
    which `prompt` still runs backward through after the first turn. Here one pass without gradient
    encodes the whole rows, for every position's keys and values; a second pass with gradient runs only
    the positions that predict a selected token, each at its own position (rotary embedding) under a
    causal mask over the whole row, against those keys and values with its own written in. Padding slots
    (rows with fewer such positions) write into one extra key position no query sees, and query
    position 0, so no softmax row is empty.
    """
    length = input_ids.shape[1]
    predicts = torch.zeros_like(select)
    predicts[:, :-1] = select[:, 1:]
    if not bool(predicts.any()):  # nothing to train: the exact path keeps the result in the autograd graph
        return _prefix_detached_states(base, input_ids, attention_mask, select, 0)
    counts = predicts.sum(1)
    slots = torch.arange(int(counts.max()), device=input_ids.device)
    real = slots[None, :] < counts[:, None]
    positions = torch.full(real.shape, length, dtype=torch.long, device=input_ids.device)
    positions[real] = predicts.nonzero()[:, 1]  # row-major: each row's positions in order
    with torch.no_grad():
        cache = base(input_ids=input_ids, attention_mask=attention_mask, use_cache=True).past_key_values
    spare = (0, 0, 0, 1)
    cache.layers = [_TrainedOverConstant(F.pad(layer.keys, spare), F.pad(layer.values, spare), positions)
                    for layer in cache.layers]
    queries = torch.where(real, positions, 0)
    visible = F.pad(attention_mask.bool(), (0, 1))
    keys = torch.arange(length + 1, device=input_ids.device)
    mask = (keys[None, None, :] <= queries[:, :, None]) & visible[:, None, :]
    hidden = base(input_ids=input_ids.gather(1, queries), attention_mask=mask[:, None], position_ids=queries,
                  past_key_values=cache, use_cache=True).last_hidden_state
    return hidden[real]
