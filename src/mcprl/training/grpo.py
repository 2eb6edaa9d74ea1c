"""One GRPO update from a batch of SkyRL generator output.

Advantages and policy losses come from SkyRL's registries (any estimator or loss SkyRL knows), and
the loss reduction is SkyRL's too; this module only turns rollouts into tensors and runs
forward/backward in micro-batches. Rows whose advantage is zero everywhere (a group whose samples
all scored the same) carry no gradient when KL is off, so they are skipped: after a warm start many
easy prompts are solved by every sample, and skipping them is most of the update's cost.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel

from mcprl._skyrl import (
    AlgorithmConfig,
    PolicyLossRegistry,
    apply_loss_reduction_to_advantages_minibatch,
    compute_advantages_and_returns,
    compute_approx_kl,
)
from mcprl.training.config import AlgoConfig, ExperimentalConfig
from mcprl.training.credit import Key, episode_keys, turn_advantages
from mcprl.training.critic import Critic, critic_update, values_for
from mcprl.training.logprobs import selected_token_logprobs


@dataclass
class GRPOBatch:
    """Rows sorted by group; response tensors are right-padded to the longest response."""

    input_ids: list[list[int]]  # prompt + response
    prompt_lens: list[int]
    loss_mask: torch.Tensor  # [B, R] 1 on the model's tokens
    old_logprobs: torch.Tensor  # [B, R] behaviour-policy logprobs (the rollout engine's; NaN: unknown, a demo)
    token_rewards: torch.Tensor  # [B, R] step rewards on the last token of each turn
    group_ids: list[str]
    turn_actions: list[list[Key] | None] = field(default_factory=list)  # per row, its turns' actions (experimental.credit)

    @property
    def size(self) -> int:
        return len(self.input_ids)


def skyrl_algorithm_config(algo: AlgoConfig, temperature: float) -> AlgorithmConfig:
    return AlgorithmConfig(
        advantage_estimator=algo.advantage_estimator, policy_loss_type=algo.policy_loss,
        loss_reduction=algo.loss_reduction, grpo_norm_by_std=algo.grpo_norm_by_std,
        eps_clip_low=algo.eps_clip_low, eps_clip_high=algo.eps_clip_high, clip_ratio_c=algo.clip_ratio_c,
        use_kl_loss=algo.use_kl_loss and algo.kl_coef > 0, kl_loss_coef=algo.kl_coef,
        use_kl_in_reward=not algo.use_kl_loss and algo.kl_coef > 0, kl_estimator_type=algo.kl_estimator,
        temperature=temperature, gamma=algo.gamma, lambd=algo.lambd)


def build_batch(output: dict[str, Any], group_ids: list[str]) -> GRPOBatch:
    order = sorted(range(len(group_ids)), key=lambda i: group_ids[i])
    responses = [output["response_ids"][i] for i in order]
    width = max(1, max(len(r) for r in responses))

    def padded(rows: list[list[float]], dtype: torch.dtype) -> torch.Tensor:
        out = torch.zeros((len(rows), width), dtype=dtype)
        for i, row in enumerate(rows):
            out[i, :len(row)] = torch.tensor(row, dtype=dtype)
        return out

    rewards = [output["rewards"][i] for i in order]
    token_rewards = [r if isinstance(r, list) else [0.0] * (len(resp) - 1) + [float(r)]
                     for r, resp in zip(rewards, responses)]
    logprobs = output.get("rollout_logprobs")
    env_metrics = output.get("env_metrics")
    if logprobs is None:
        raise ValueError("rollouts carry no logprobs: the engine must return them (sampling logprobs=0)")
    return GRPOBatch(
        input_ids=[list(output["prompt_token_ids"][i]) + list(output["response_ids"][i]) for i in order],
        prompt_lens=[len(output["prompt_token_ids"][i]) for i in order],
        loss_mask=padded([output["loss_masks"][i] for i in order], torch.float32),
        old_logprobs=padded([logprobs[i] for i in order], torch.float32),
        token_rewards=padded(token_rewards, torch.float32),
        group_ids=[group_ids[i] for i in order],
        turn_actions=[episode_keys(env_metrics[i]) for i in order] if env_metrics else [],
    )


def advantages(batch: GRPOBatch, config: AlgorithmConfig, *, negative_weight: float = 1.0,
               credit: str = "episode", values: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """SkyRL's estimator (with the critic's `values` for GAE: `returns_of` gives its returns), moved onto the
    turns that made the difference when `credit` is "turn" (experimental.credit, mcprl.training.credit), then
    negative advantages scaled by `negative_weight` (experimental.negative_weight). Returns them and how many
    rows kept an episode advantage under turn credit."""
    adv, _ = estimate(batch, config, values)
    kept = 0
    if credit == "turn":
        actions = batch.turn_actions or [None] * batch.size
        adv, kept = turn_advantages(adv, batch.loss_mask, batch.group_ids, actions)
    adv = torch.where(adv < 0, adv * negative_weight, adv)
    return adv * batch.loss_mask, kept


def estimate(batch: GRPOBatch, config: AlgorithmConfig, values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns) from SkyRL's registry; GAE reads the step rewards on each turn's last token."""
    index = np.array(batch.group_ids, dtype=object)
    return compute_advantages_and_returns(
        token_level_rewards=batch.token_rewards, response_mask=batch.loss_mask, index=index,
        adv_estimator=config.advantage_estimator, config=config, values=values,
        grpo_norm_by_std=config.grpo_norm_by_std, gamma=config.gamma, lambd=config.lambd)


def token_tensors(batch: GRPOBatch, rows: list[int], pad_id: int) -> tuple[torch.Tensor, ...]:
    """The rows as model input: token ids and attention mask, left-aligned and padded, and where the
    model's own response tokens are (the positions whose logprobs the loss uses)."""
    width = max(len(batch.input_ids[i]) for i in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    select = torch.zeros((len(rows), width), dtype=torch.bool)
    for j, i in enumerate(rows):
        seq, p = batch.input_ids[i], batch.prompt_lens[i]
        ids[j, :len(seq)] = torch.tensor(seq)
        attention[j, :len(seq)] = 1
        resp_mask = batch.loss_mask[i, :len(seq) - p].bool()
        select[j, p:len(seq)] = resp_mask
    return ids, attention, select


def scatter_tokens(flat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Flat per-token values (masked positions, row-major) back into a [B, R] tensor on their device."""
    return torch.zeros(mask.shape, dtype=flat.dtype, device=flat.device).masked_scatter(mask.to(flat.device).bool(), flat)


def current_logprobs(model: PreTrainedModel, batch: GRPOBatch, rows: list[int], pad_id: int, *,
                     temperature: float, bf16: bool, micro_batch_size: int) -> torch.Tensor:
    """[len(rows), R] logprobs of the rows' tokens under `model` as it is now, without gradient."""
    parts = []
    for start in range(0, len(rows), micro_batch_size):
        chunk = rows[start:start + micro_batch_size]
        ids, attention, select = token_tensors(batch, chunk, pad_id)
        with torch.no_grad():
            stats = selected_token_logprobs(model, ids, attention, select, temperature=temperature, bf16=bf16)
        parts.append(scatter_tokens(stats.logprobs, batch.loss_mask[chunk]).cpu())  # beside the batch's other tensors
    return torch.cat(parts)


def reference_logprobs(model: PreTrainedModel, batch: GRPOBatch, rows: list[int], pad_id: int, *,
                       temperature: float, bf16: bool, ref_model: PreTrainedModel | None,
                       micro_batch_size: int) -> torch.Tensor:
    """Logprobs under the reference policy: the base model with the LoRA adapter off, or a frozen copy."""
    disable = model.disable_adapter() if ref_model is None else contextlib.nullcontext()
    with disable:
        return current_logprobs(ref_model or model, batch, rows, pad_id, temperature=temperature, bf16=bf16,
                                micro_batch_size=micro_batch_size)


def fill_unknown_behaviour(model: PreTrainedModel, batch: GRPOBatch, pad_id: int, *, temperature: float, bf16: bool,
                           micro_batch_size: int) -> list[int]:
    """Rows whose behaviour logprobs are NaN (expert demos: no policy sampled them) take the current
    policy's, so their first-epoch ratio is 1 and the loss is a plain policy gradient on the demo's tokens.
    Returns those rows."""
    rows = [i for i in range(batch.size) if bool(batch.old_logprobs[i].isnan().any())]
    if rows:
        mine = current_logprobs(model, batch, rows, pad_id, temperature=temperature, bf16=bf16,
                                micro_batch_size=micro_batch_size)
        batch.old_logprobs[rows] = torch.where(batch.loss_mask[rows].bool(), mine, 0.0)
    return rows


def update(model: PreTrainedModel, batch: GRPOBatch, config: AlgorithmConfig, algo: AlgoConfig,
           optimizer: torch.optim.Optimizer, scheduler: Any, *, pad_id: int, temperature: float, bf16: bool,
           ref_model: PreTrainedModel | None = None,
           experimental: ExperimentalConfig | None = None, critic: Critic | None = None,
           train_policy: bool = True) -> dict[str, float]:
    """Advantages, then `algo.epochs` passes of micro-batched forward/backward with one optimizer step each;
    `experimental` knobs (negative_weight, credit, grpo_detach) change it only when set. With a `critic`
    (advantage_estimator gae), its values feed GAE and it trains on every row (`critic/*` metrics); without
    `train_policy` (the critic's warm-up steps) only the critic does."""
    experimental = experimental or ExperimentalConfig()
    use_kl = algo.kl_coef > 0
    all_rows = list(range(batch.size))
    demos = fill_unknown_behaviour(model, batch, pad_id, temperature=temperature, bf16=bf16,
                                   micro_batch_size=algo.micro_batch_size)
    ref = reference_logprobs(model, batch, all_rows, pad_id, temperature=temperature, bf16=bf16,
                             ref_model=ref_model, micro_batch_size=algo.micro_batch_size) if use_kl else None
    total_tokens = batch.loss_mask.sum().clamp(min=1)
    metrics: dict[str, float] = {"rows": float(batch.size), "demo_rows": float(len(demos))}
    if use_kl:
        kl = compute_approx_kl(batch.old_logprobs, ref, batch.loss_mask, config.kl_estimator_type)
        metrics["ref_kl"] = float((kl * batch.loss_mask).sum() / total_tokens)
        if config.use_kl_in_reward:
            batch.token_rewards = batch.token_rewards - algo.kl_coef * kl
    values = None
    if critic is not None:
        values = values_for(critic, batch, pad_id)
        _, returns = estimate(batch, config, values)
        metrics |= {f"critic_{k}": v for k, v in critic_update(critic, batch, returns, values, pad_id,
                                                                epochs=algo.epochs).items()}
        if not train_policy:
            return metrics
    adv, kept = advantages(batch, config, negative_weight=experimental.negative_weight, credit=experimental.credit,
                           values=values)
    boundaries = group_boundaries(batch.group_ids)
    scaled = apply_loss_reduction_to_advantages_minibatch(
        adv, batch.loss_mask, config.loss_reduction, algo.micro_batch_size, batch.loss_mask.shape[1],
        prompt_boundaries=boundaries)
    active = [i for i in all_rows if use_kl or bool(adv[i].abs().sum() > 0)]
    loss_fn = PolicyLossRegistry.get(config.policy_loss_type)
    metrics["active_rows"] = float(len(active))
    if experimental.credit == "turn":
        metrics["episode_credit_rows"] = float(kept)
    for _ in range(max(1, algo.epochs)):
        sums = {"loss": 0.0, "dev": 0.0, "dev_sq": 0.0, "kl": 0.0, "entropy": 0.0, "clip": 0.0, "tokens": 0.0}
        for start in range(0, len(active), algo.micro_batch_size):
            rows = active[start:start + algo.micro_batch_size]
            ids, attention, select = token_tensors(batch, rows, pad_id)
            stats = selected_token_logprobs(model, ids, attention, select, temperature=temperature, bf16=bf16,
                                            with_entropy=True, detach=experimental.grpo_detach)
            device = stats.logprobs.device  # the model's; the batch stays on the CPU
            mask = batch.loss_mask[rows].to(device)
            logp = scatter_tokens(stats.logprobs, mask)
            old = batch.old_logprobs[rows].to(device)
            loss, loss_metrics = loss_fn(logp, old, scaled[rows].to(device), config=config, loss_mask=mask,
                                         rollout_logprobs=None)
            if use_kl and config.use_kl_loss:
                kl_tokens = compute_approx_kl(logp, ref[rows].to(device), mask, config.kl_estimator_type)
                loss = loss + algo.kl_coef * (kl_tokens * mask).sum() / total_tokens
            loss.backward()
            with torch.no_grad():
                n = mask.sum().item()
                log_ratio = (logp - old)[mask.bool()].double()
                # ratio - 1 in float64: on-policy ratios sit within 1e-6 of 1, where float32 sums of ratio and
                # ratio^2 cancel to a std of 0 (or 1e-4 of noise) and would trip the health check
                dev = torch.expm1(log_ratio)
                sums["loss"] += loss.item()
                sums["dev"] += dev.sum().item()
                sums["dev_sq"] += (dev ** 2).sum().item()
                sums["kl"] += (-log_ratio).sum().item()
                sums["entropy"] += stats.entropy.sum().item() if stats.entropy is not None else 0.0
                sums["clip"] += loss_metrics.get("clip_ratio", 0.0) * n
                sums["tokens"] += n
        params = [p for p in model.parameters() if p.requires_grad]
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, algo.grad_clip)) if active else 0.0
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    n = max(sums["tokens"], 1.0)
    mean_dev = sums["dev"] / n
    metrics.update({
        "policy_loss": sums["loss"], "ratio_mean": 1.0 + mean_dev,
        "ratio_std": max(0.0, sums["dev_sq"] / n - mean_dev ** 2) ** 0.5,
        "kl": sums["kl"] / n, "entropy": sums["entropy"] / n, "clip_frac": sums["clip"] / n,
        "grad_norm": grad_norm, "lr": scheduler.get_last_lr()[0], "trained_tokens": sums["tokens"],
        "adv_abs_mean": float(adv.abs().sum() / total_tokens),
    })
    return metrics


def group_boundaries(group_ids: list[str]) -> list[tuple[int, int]]:
    bounds, start = [], 0
    for i in range(1, len(group_ids) + 1):
        if i == len(group_ids) or group_ids[i] != group_ids[start]:
            bounds.append((start, i))
            start = i
    return bounds
