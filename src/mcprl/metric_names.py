"""One namespaced name per training metric, the same in every sink (metrics.jsonl, W&B, TensorBoard).

The trainer computes metrics under short names (`reward_mean`, `ratio_std`) and the sinks write them
under `rollout/reward_mean`, `update/ratio_std`, `time/rollout_s`: what was sampled, what the update
did, where the time went. A GRPO key not in the table is written under `grpo/`; every SFT key under
`sft/`. `short()` turns a row back, so readers (the report) take rows of any version alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Keys that are bookkeeping, not metrics: written as they are.
PLAIN = ("step", "phase")

GRPO_NAMES: dict[str, str] = {
    # what the step's rollouts were (every sample batch, dropped groups included)
    **{key: f"rollout/{key}" for key in (
        "reward_mean", "reward_std", "success_rate", "tool_success_rate", "tool_timeout_rate", "malformed_rate",
        "injected_fault_rate", "episode_len", "frac_prompts_with_signal", "reward_var_per_prompt_mean", "frac_all_good", "frac_all_bad",
        "frac_mixed", "sample_batches", "guided_groups")},
    "rollout_tok_s": "rollout/tok_s",
    # what the update did
    **{key: f"update/{key}" for key in (
        "policy_loss", "ratio_mean", "ratio_std", "kl", "ref_kl", "entropy", "clip_frac", "grad_norm", "lr",
        "trained_tokens", "adv_abs_mean", "rows", "demo_rows", "active_rows", "episode_credit_rows")},
    # PPO's critic (algo.advantage_estimator gae)
    **{f"critic_{key}": f"critic/{key}" for key in (
        "value_loss", "values_mean", "returns_mean", "explained_variance", "value_clip_frac", "value_grad_norm",
        "value_lr", "fitted_explained_variance")},
    "critic_only": "critic/warmup",
    # where the time and memory went
    "time_s": "time/step_s", "rollout_s": "time/rollout_s", "rss_gb": "system/rss_gb",
    # greedy probes of the guard (experimental)
    "guard_success": "guard/success", "guard_restored": "guard/restored",
}
SFT_NAMES: dict[str, str] = {"sft_loss": "sft/loss", "sft_tokens": "sft/tokens", "sft_ppl": "sft/ppl",
                             "time_s": "sft/step_s", "rss_gb": "sft/rss_gb"}
_SHORT = {long: key for names in (GRPO_NAMES, SFT_NAMES) for key, long in names.items()}


def phase_of(metrics: Mapping[str, Any]) -> str:
    """sft or grpo; rows of old runs carry no phase, but SFT rows always carry its loss."""
    return str(metrics.get("phase") or ("sft" if "sft_loss" in metrics or "sft/loss" in metrics else "grpo"))


def namespaced(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A step's metrics under their sink names."""
    phase = phase_of(metrics)
    names = SFT_NAMES if phase == "sft" else GRPO_NAMES
    return {key if key in PLAIN or "/" in key else names.get(key, f"{phase}/{key}"): value
            for key, value in metrics.items()}


def short(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of metrics.jsonl (namespaced, or flat from an older run) under the trainer's short names."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = _SHORT.get(key)
        if name is None and "/" in key:
            name = key.split("/", 1)[1]
        out[name or key] = value
    return out

MEANINGS: dict[str, str] = {
    "reward_mean": "mean episode reward over every rollout of the step", "reward_std": "its standard deviation",
    "success_rate": "share of episodes that solved their task", "tool_success_rate": "share of tool calls that succeeded",
    "tool_timeout_rate": "share of tool calls that timed out", "malformed_rate": "share of turns with a malformed call",
    "injected_fault_rate": "share of tool calls that failed on purpose (rollout.faults)",
    "episode_len": "model turns per episode",
    "frac_prompts_with_signal": "share of groups whose rewards differ (no variance, no gradient)",
    "reward_var_per_prompt_mean": "mean within-group reward variance",
    "frac_all_good": "share of groups that all solved the task", "frac_all_bad": "share of groups that all failed",
    "frac_mixed": "share of groups with both (where GRPO learns what separates them)",
    "sample_batches": "rollout batches the step drew (dynamic sampling)",
    "guided_groups": "groups that trained on an expert demo (experimental)",
    "rollout_tok_s": "tokens the rollout engine generated per second",
    "policy_loss": "the PPO-clip loss", "ratio_mean": "mean importance ratio (1 at the first epoch)",
    "ratio_std": "its std (0 for long: the policy does not move)", "kl": "approx KL, sampling vs updated policy",
    "ref_kl": "KL to the warm start (algo.kl_coef > 0)", "entropy": "mean token entropy",
    "clip_frac": "share of tokens clipped", "grad_norm": "gradient norm before clipping", "lr": "learning rate",
    "trained_tokens": "tokens in the loss", "adv_abs_mean": "mean |advantage| per token",
    "rows": "rollouts in the batch", "demo_rows": "expert demo rows in it", "active_rows": "rows with a non-zero advantage",
    "episode_credit_rows": "rows kept by turn credit (experimental)",
    "critic_value_loss": "PPO's clipped value loss (algo.advantage_estimator gae)",
    "critic_values_mean": "mean value on the trained tokens, before the critic's update",
    "critic_returns_mean": "mean GAE return on them",
    "critic_explained_variance": "1 - Var(returns - values) / Var(returns) before the update: 1 perfect, <= 0 useless",
    "critic_fitted_explained_variance": "the same with the values of the critic's last pass over the batch",
    "critic_value_clip_frac": "share of tokens whose value the clip held",
    "critic_value_grad_norm": "the critic's gradient norm before clipping",
    "critic_value_lr": "the critic's learning rate",
    "critic_only": "1 on the critic's warm-up steps (the policy did not train)",
    "time_s": "the step's seconds", "rollout_s": "seconds of it in rollouts", "rss_gb": "resident memory, GB",
    "guard_success": "greedy probe success (experimental guard)", "guard_restored": "1 when the guard put the best weights back",
    "sft_loss": "mean token NLL of the demos", "sft_tokens": "tokens in the loss", "sft_ppl": "exp(loss)",
}


def reference() -> str:
    """The markdown table of docs/metrics.md."""
    rows = ["| name | trainer's short name | meaning |", "|---|---|---|"]
    for names in (GRPO_NAMES, SFT_NAMES):
        rows += [f"| `{long}` | `{key}` | {MEANINGS.get(key, '')} |" for key, long in names.items()]
    rows += ["| `sft/lr`, `sft/grad_norm` | `lr`, `grad_norm` | as in the update, for SFT steps |"]
    return "\n".join(rows)
