"""Supervised warm start on expert trajectories: the model learns the call format and the chains.

The loss covers the assistant turns only (tool calls, final answers and their end-of-turn token),
never the prompt or tool outputs, exactly the tokens GRPO later trains. An assistant message with
`"weight": 0` (OpenAI's fine-tuning convention) stays in the context but out of the loss: a demo's
deliberate mistake, shown so that the model learns what follows it.
"""

from __future__ import annotations

import json
import math
import random
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

import torch
from torch.optim.swa_utils import get_ema_multi_avg_fn
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.integrations.neftune import activate_neftune, deactivate_neftune

from mcprl.training.logprobs import Detach, selected_token_logprobs
from mcprl.training.ordering import interleave_families


@dataclass
class SFTExample:
    input_ids: list[int]
    loss_mask: list[bool]  # True on the model's own tokens


def load_experts(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def tokenize_conversation(messages: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase,
                          max_seq_len: int) -> SFTExample:
    """Render with the chat template, then mark each assistant message (unless its weight is 0) and the end
    token that follows it."""
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    spans, cursor = [], 0
    end_token = tokenizer.eos_token or ""
    for message in messages:
        start = text.find(message["content"], cursor)
        if start < 0:
            raise ValueError(f"chat template dropped a {message['role']} message: {message['content'][:60]!r}")
        stop = start + len(message["content"])
        if message["role"] == "assistant" and message.get("weight", 1):
            if end_token and text.startswith(end_token, stop):
                stop += len(end_token)
            spans.append((start, stop))
        cursor = stop
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [any(s <= a < e for s, e in spans) for a, _ in enc["offset_mapping"]]
    return SFTExample(enc["input_ids"][:max_seq_len], mask[:max_seq_len])


def batches(examples: list[SFTExample], batch_size: int, rng: random.Random,
            families: Sequence[str] | None = None) -> Iterator[list[SFTExample]]:
    """Batches in a fresh seeded order every pass, forever. Without `families` (one per example) they are
    length-bucketed (little padding) and shuffled; with them, a shuffle dealt round-robin over the families
    (sft.order: stratified), so any stretch of steps spans the families."""
    while True:
        if families is None:
            order = sorted(range(len(examples)), key=lambda i: (len(examples[i].input_ids), rng.random()))
            chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
            rng.shuffle(chunks)
        else:
            order = list(range(len(examples)))
            rng.shuffle(order)
            order = interleave_families(order, families)
            chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        for chunk in chunks:
            yield [examples[i] for i in chunk]


def collate(batch: list[SFTExample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(x.input_ids) for x in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    select = torch.zeros((len(batch), width), dtype=torch.bool)
    for i, x in enumerate(batch):
        n = len(x.input_ids)
        ids[i, :n] = torch.tensor(x.input_ids)
        attention[i, :n] = 1
        select[i, :n] = torch.tensor(x.loss_mask)
    select[:, 0] = False  # nothing predicts the first token
    return ids, attention, select


def sft_step(model: PreTrainedModel, batch: list[SFTExample], pad_id: int, *, micro_batch_size: int,
             bf16: bool, detach: Detach = "none") -> dict[str, float]:
    """Accumulate gradients of the token-mean NLL over the batch; the caller steps the optimizer."""
    total_tokens = sum(sum(x.loss_mask[1:]) for x in batch)
    loss_sum = 0.0
    for i in range(0, len(batch), micro_batch_size):
        micro = batch[i:i + micro_batch_size]
        ids, attention, select = collate(micro, pad_id)
        stats = selected_token_logprobs(model, ids, attention, select, bf16=bf16, detach=detach)
        loss = -stats.logprobs.sum() / max(total_tokens, 1)
        loss.backward()
        loss_sum += loss.item()
    return {"sft_loss": loss_sum, "sft_tokens": float(total_tokens),
            "sft_ppl": math.exp(min(loss_sum, 20.0))}


@contextmanager
def noisy_embeddings(model: PreTrainedModel, alpha: float | None) -> Iterator[None]:
    """NEFTune's noise on the input embeddings while the model is in train mode (sft.neftune_alpha), by
    transformers' own hook; nothing when alpha is null or 0."""
    if not alpha:
        yield
        return
    handle = activate_neftune(model, alpha)
    try:
        yield
    finally:
        deactivate_neftune(model, handle)


class WeightAverage:
    """Exponential moving average of the parameters that train (sft.ema_decay). Frozen ones (a LoRA base,
    the layers below finetune.top_layers) never change, so unlike torch's AveragedModel, which copies and
    averages the whole module, they are neither copied nor averaged. As there, the first update copies and
    later ones apply torch's EMA update."""

    def __init__(self, params: Iterable[torch.nn.Parameter], decay: float) -> None:
        self.params = list(params)
        self._ema = get_ema_multi_avg_fn(decay)
        self.mean: list[torch.Tensor] | None = None

    @torch.no_grad()
    def update(self) -> None:
        if self.mean is None:
            self.mean = [p.detach().clone() for p in self.params]
        else:
            self._ema(self.mean, [p.detach() for p in self.params], None)

    @torch.no_grad()
    def apply(self) -> None:
        """Write the average into the live parameters (nothing before the first update)."""
        for live, mean in zip(self.params, self.mean or []):
            live.copy_(mean)

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mean = state["mean"]
