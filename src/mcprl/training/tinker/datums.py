"""GRPO rows as Tinker datums, and the algo settings as a Tinker loss.

A row is `prompt + response` of SkyRL's generator output, exactly the tokens sampled (token-in,
token-out). Position `i` of a datum predicts token `i + 1`: `model_input = full[:-1]`,
`target_tokens = full[1:]`, and `weights` (the loss mask, always sent: SkyRL's server takes a missing
one as all ones), `logprobs` (the sampler's) and `advantages` are the response-aligned tensors shifted
the same way, zero on the prompt and on tool results.

Reductions differ between servers: hosted Tinker sums the per-token loss, SkyRL's server takes each
sequence's mean and averages over the sequences of an optimizer step. Advantages are scaled here so
either gives `algo.loss_reduction` over the whole batch, as the embedded trainer computes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from mcprl._skyrl import apply_loss_reduction_to_advantages_minibatch
from mcprl.training.config import CRITIC_ESTIMATORS, AlgoConfig, TrainConfig
from mcprl.training.grpo import GRPOBatch, group_boundaries

# algo.policy_loss -> Tinker's loss_fn (the ones both hosted Tinker and SkyRL's server implement)
LOSSES = {"regular": "ppo", "importance_sampling": "importance_sampling", "cispo": "cispo"}
Reduction = Literal["sum", "sequence_mean"]


@dataclass
class DatumRow:
    """One datum's inputs as plain lists, all of length `len(tokens) - 1` except `tokens` itself."""

    tokens: list[int]  # the full sequence (cut to max_sequence_length)
    weights: list[float]
    logprobs: list[float]
    advantages: list[float]

    @property
    def trained_tokens(self) -> int:
        return int(sum(w > 0 for w in self.weights))


def refusal(cfg: TrainConfig) -> str | None:
    """Why the Tinker engine cannot run this config (one line), or None."""
    a, x = cfg.algo, cfg.experimental
    if a.policy_loss not in LOSSES:
        return (f"algo.policy_loss={a.policy_loss}: the Tinker API has no such loss; use one of "
                f"{', '.join(LOSSES)} (regular is PPO's clip)")
    if a.advantage_estimator in CRITIC_ESTIMATORS:
        return (f"algo.advantage_estimator={a.advantage_estimator} needs a critic, which the Tinker API does not train; "
                f"use --engine embedded or skyrl, or a critic-free estimator (grpo, rloo, reinforce++)")
    if a.kl_coef > 0:
        return "algo.kl_coef > 0: the Tinker engine has no KL term (SkyRL's server computes no reference logprobs); set 0"
    if a.epochs != 1:
        return f"algo.epochs={a.epochs}: the Tinker engine takes one optimizer step per GRPO step; set 1"
    for key, on in (("experimental.expert_guidance", x.expert_guidance), ("experimental.probe", x.probe.per_family),
                    ("experimental.guard", x.guard.every), ("experimental.grpo_detach", x.grpo_detach != "none")):
        if on:
            return f"{key}: the Tinker engine does not run this experiment; use --engine embedded"
    return None


def ignored(cfg: TrainConfig) -> list[str]:
    """Settings of the embedded recipe the Tinker engine runs without (a line each in the plan and the run)."""
    notes = []
    if cfg.finetune.mode == "full":
        notes.append(f"finetune.mode=full: a LoRA adapter trains instead, at tinker.lr_multiplier="
                     f"{cfg.tinker.lr_multiplier:g} x sft.lr and algo.lr")
    if cfg.sft.enabled and cfg.sft.ema_decay:
        notes.append(f"sft.ema_decay={cfg.sft.ema_decay:g}: no weight average (the weights live on the server)")
    if cfg.sft.enabled and cfg.sft.neftune_alpha:
        notes.append(f"sft.neftune_alpha={cfg.sft.neftune_alpha:g}: no embedding noise (the forward pass runs on "
                     "the server)")
    return notes


def loss_for(algo: AlgoConfig) -> tuple[str, dict[str, float] | None]:
    """Tinker's loss_fn and loss_fn_config for `algo` (PPO's clip thresholds are ratios, not epsilons)."""
    name = LOSSES[algo.policy_loss]
    if name in ("ppo", "cispo"):
        return name, {"clip_low_threshold": 1.0 - algo.eps_clip_low, "clip_high_threshold": 1.0 + algo.eps_clip_high}
    return name, None


def datum_rows(batch: GRPOBatch, advantages: torch.Tensor, *, loss_reduction: str, server: Reduction,
               max_len: int | None = None) -> tuple[list[DatumRow], int]:
    """The rows with a gradient (some non-zero advantage), scaled for `server`, and how many were cut
    to `max_len`. Zero-advantage rows carry no gradient (no KL term here), as in the embedded trainer."""
    scaled = apply_loss_reduction_to_advantages_minibatch(
        advantages, batch.loss_mask, loss_reduction, batch.size, batch.loss_mask.shape[1],
        prompt_boundaries=group_boundaries(batch.group_ids))
    rows, truncated = [], 0
    for i in range(batch.size):
        if not bool(advantages[i].abs().sum() > 0):
            continue
        full, n = batch.input_ids[i], batch.prompt_lens[i]
        r = len(full) - n
        weights = [0.0] * n + batch.loss_mask[i, :r].tolist()
        logprobs = [0.0] * n + torch.where(batch.loss_mask[i, :r] > 0, batch.old_logprobs[i, :r], 0.0).tolist()
        adv = [0.0] * n + (scaled[i, :r] * batch.loss_mask[i, :r]).tolist()  # hosted RL losses have no mask
        if max_len is not None and len(full) > max_len:
            full, weights, logprobs, adv = full[:max_len], weights[:max_len], logprobs[:max_len], adv[:max_len]
            truncated += 1
        rows.append(DatumRow(list(full), weights[1:], logprobs[1:], adv[1:]))
    rows = [row for row in rows if row.trained_tokens]
    if server == "sequence_mean":  # undo the server's per-sequence mean and its mean over sequences
        for row in rows:
            factor = row.trained_tokens * len(rows)
            row.advantages = [a * factor for a in row.advantages]
    return rows, truncated


def sft_row(input_ids: list[int], loss_mask: list[bool], *, server: Reduction, batch_tokens: int) -> DatumRow:
    """A demo as a cross_entropy datum. Summed (hosted), weights of 1/batch_tokens make the batch's loss
    the embedded SFT's token mean. SkyRL's server divides each sequence's loss by its weights' sum, so no
    weighting survives there: its loss is the mean over demos of each demo's token mean (the same at the
    quickstart's batch of 1)."""
    weights = [float(m) for m in loss_mask[1:]]
    scale = 1.0 if server == "sequence_mean" else 1.0 / max(1, batch_tokens)
    return DatumRow(list(input_ids), [w * scale for w in weights], [0.0] * len(weights), [0.0] * len(weights))


def to_datum(row: DatumRow, loss: str) -> Any:
    from tinker import types

    inputs: dict[str, Any] = {"target_tokens": row.tokens[1:], "weights": row.weights}
    if loss != "cross_entropy":
        inputs |= {"logprobs": row.logprobs, "advantages": row.advantages}
    return types.Datum(model_input=types.ModelInput.from_ints(row.tokens[:-1]), loss_fn_inputs=inputs)

