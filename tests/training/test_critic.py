"""PPO's critic on a tiny model: it learns values (loss falls, explained variance above 0.5), GAE takes them
through SkyRL's registry, a warm-up step trains the critic alone, and a checkpoint restores it exactly."""

from __future__ import annotations

import copy

import pytest
import torch

from mcprl.training import grpo
from mcprl.training.config import AlgoConfig, CriticConfig
from mcprl.training.critic import critic_on, critic_update, explained_variance, values_for

from .tiny_model import tiny_llama


def _batch(n: int = 16) -> grpo.GRPOBatch:
    """Returns the prompt decides: reward 1 when its last token is even. Responses of 6 tokens, the middle two
    (a tool's output) untrained; one group per row (GAE needs no groups)."""
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 64, (5,), generator=g).tolist() for _ in range(n)]
    responses = [torch.randint(1, 64, (6,), generator=g).tolist() for _ in range(n)]
    rewards = [float(p[-1] % 2 == 0) for p in prompts]
    return grpo.build_batch({"prompt_token_ids": prompts, "response_ids": responses,
                             "loss_masks": [[1, 1, 0, 0, 1, 1]] * n, "rewards": rewards,
                             "rollout_logprobs": [[0.0] * 6] * n}, [f"r{i}" for i in range(n)])


def _critic(**overrides):
    return critic_on(tiny_llama(), CriticConfig(mode="full", lr=3e-3, value_clip=None, **overrides))


def test_the_critic_learns_the_values_of_a_deterministic_task():
    batch, critic = _batch(), _critic()
    config = grpo.skyrl_algorithm_config(AlgoConfig(advantage_estimator="gae", gamma=1.0, lambd=1.0), 1.0)
    history = []
    for _ in range(25):
        values = values_for(critic, batch, pad_id=0)
        _, returns = grpo.estimate(batch, config, values)
        history.append(critic_update(critic, batch, returns, values, pad_id=0))
    assert history[0]["values_mean"] == 0.0 and history[0]["explained_variance"] <= 0.0  # the zero head
    assert history[-1]["value_loss"] < 0.3 * history[0]["value_loss"]
    assert history[-1]["explained_variance"] > 0.5
    assert history[-1]["returns_mean"] == pytest.approx(float(batch.token_rewards.sum(1).mean()), abs=1e-6)


def test_gae_uses_the_values_and_the_turn_rewards():
    """lambda 1, gamma 1: advantage = return - value on every trained token; lambda 0: the one-step TD error."""
    batch = _batch(4)
    values = torch.full(batch.loss_mask.shape, 0.25) * batch.loss_mask
    adv, returns = grpo.estimate(batch, grpo.skyrl_algorithm_config(AlgoConfig(advantage_estimator="gae"), 1.0),
                                 values)
    final = batch.token_rewards.sum(1, keepdim=True)
    mask = batch.loss_mask.bool()
    assert torch.allclose(returns[mask], final.expand_as(returns)[mask])
    raw = (returns - values)[mask]
    assert torch.allclose(adv[mask] * raw.std() + raw.mean(), raw, atol=1e-5)  # SkyRL whitens GAE advantages


def test_a_warm_up_step_trains_the_critic_only_and_a_policy_step_both():
    batch = _batch(8)
    policy = tiny_llama()
    algo = AlgoConfig(advantage_estimator="gae", micro_batch_size=4)
    config = grpo.skyrl_algorithm_config(algo, 1.0)

    def step(train_policy: bool):
        model, critic = copy.deepcopy(policy), _critic()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        before = [p.detach().clone() for p in model.parameters()]
        head = critic.model.head.weight.detach().clone()
        metrics = grpo.update(model, copy.deepcopy(batch), config, algo, opt, sched, pad_id=0, temperature=1.0,
                              bf16=False, critic=critic, train_policy=train_policy)
        moved = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
        return metrics, moved, not torch.equal(head, critic.model.head.weight)

    warm, policy_moved, critic_moved = step(False)
    assert critic_moved and not policy_moved and "policy_loss" not in warm and "critic_value_loss" in warm
    both, policy_moved, critic_moved = step(True)
    assert critic_moved and policy_moved and {"policy_loss", "critic_value_loss", "critic_explained_variance"} <= set(both)


def test_a_saved_critic_restores_weights_optimizer_and_schedule(tmp_path):
    batch = _batch(8)
    config = grpo.skyrl_algorithm_config(AlgoConfig(advantage_estimator="gae"), 1.0)

    def train(critic, steps):
        out = []
        for _ in range(steps):
            values = values_for(critic, batch, pad_id=0)
            out.append(critic_update(critic, batch, grpo.estimate(batch, config, values)[1], values, pad_id=0))
        return out

    straight = _critic()
    losses = [m["value_loss"] for m in train(straight, 4)]
    first = _critic()
    train(first, 2)
    first.save(tmp_path)
    resumed = _critic()
    resumed.load(tmp_path)
    assert [m["value_loss"] for m in train(resumed, 2)] == pytest.approx(losses[2:], abs=1e-6)


def test_explained_variance_reads_as_documented():
    returns = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    mask = torch.ones_like(returns)
    assert explained_variance(returns, returns, mask) == pytest.approx(1.0)
    assert explained_variance(torch.full_like(returns, 0.5), returns, mask) == pytest.approx(0.0)
    assert explained_variance(1 - returns, returns, mask) < 0


def test_the_summary_says_whether_the_critic_learned(tmp_path):
    """summary.json's critic section comes from metrics.jsonl's GRPO rows; a run without a critic has none."""
    import json

    from mcprl.training.loop.evals import critic_summary

    steps = [{"step": 1, "phase": "grpo", "critic/value_loss": 0.5, "critic/explained_variance": 0.0,
              "critic/values_mean": 0.0, "critic/returns_mean": -0.4, "critic/value_clip_frac": 0.0,
              "critic/warmup": 1.0},
             {"step": 2, "phase": "grpo", "critic/value_loss": 0.2, "critic/explained_variance": 0.6,
              "critic/values_mean": -0.3, "critic/returns_mean": -0.35, "critic/value_clip_frac": 0.5,
              "critic/warmup": 0.0}]
    rows = [{"step": 1, "phase": "sft", "sft/loss": 1.0}, *steps]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = critic_summary(tmp_path)
    assert summary["steps"] == 2 and summary["warmup_steps"] == 1
    assert summary["value_loss"] == {"first": 0.5, "last": 0.2}
    assert summary["explained_variance"] == {"first": 0.0, "last": 0.6, "max": 0.6}
    assert summary["values_mean"] == -0.3 and summary["value_clip_frac"] == 0.25
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert critic_summary(tmp_path) == {}
