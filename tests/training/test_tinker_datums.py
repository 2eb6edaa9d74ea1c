"""GRPO rows as Tinker datums: the shift by one, the masks and the advantage scaling."""

import pytest
import torch

from mcprl.training.config import TrainConfig
from mcprl.training.grpo import GRPOBatch
from mcprl.training.tinker.datums import datum_rows, loss_for, refusal, sft_row


def _batch() -> GRPOBatch:
    # two rows of one group: prompt [1, 2], responses [3, 4, 5] (tool result 4 masked) and [6, 7]
    return GRPOBatch(
        input_ids=[[1, 2, 3, 4, 5], [1, 2, 6, 7]], prompt_lens=[2, 2],
        loss_mask=torch.tensor([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]]),
        old_logprobs=torch.tensor([[-0.1, float("nan"), -0.3], [-0.4, -0.5, 0.0]]),
        token_rewards=torch.zeros(2, 3), group_ids=["g", "g"])


def test_rows_are_shifted_by_one_and_aligned():
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 0.0]])
    rows, truncated = datum_rows(_batch(), adv, loss_reduction="token_mean", server="sum")
    assert truncated == 0 and len(rows) == 2
    a, b = rows
    assert a.tokens == [1, 2, 3, 4, 5] and len(a.weights) == len(a.logprobs) == len(a.advantages) == 4
    # position i predicts token i + 1: the first trained target is 3 (position 1), 4 is a tool result
    assert a.weights == [0.0, 1.0, 0.0, 1.0]
    assert a.logprobs == pytest.approx([0.0, -0.1, 0.0, -0.3])  # NaN under the mask never reaches the server
    assert b.weights == [0.0, 1.0, 1.0]
    # token_mean over the batch: each trained token's advantage divided by the 4 trained tokens
    assert a.advantages[1] == pytest.approx(0.25) and b.advantages[1] == pytest.approx(-0.25)
    assert a.advantages[2] == 0.0


def test_zero_advantage_rows_are_dropped_and_long_rows_cut():
    adv = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    rows, _ = datum_rows(_batch(), adv, loss_reduction="token_mean", server="sum")
    assert [r.tokens for r in rows] == [[1, 2, 6, 7]]
    rows, truncated = datum_rows(_batch(), torch.ones(2, 3), loss_reduction="token_mean", server="sum", max_len=4)
    assert truncated == 1 and rows[0].tokens == [1, 2, 3, 4] and len(rows[0].weights) == 3


def test_sequence_mean_server_gets_advantages_times_its_divisors():
    adv = torch.tensor([[1.0, 1.0, 1.0], [-0.5, -0.5, 0.0]])
    summed, _ = datum_rows(_batch(), adv, loss_reduction="token_mean", server="sum")
    meaned, _ = datum_rows(_batch(), adv, loss_reduction="token_mean", server="sequence_mean")
    for s, m in zip(summed, meaned):
        factor = s.trained_tokens * len(summed)
        assert m.advantages == pytest.approx([x * factor for x in s.advantages])
    # the same loss either way: the embedded trainer's token mean over the batch
    assert _server_loss(meaned, "sequence_mean") == pytest.approx(_server_loss(summed, "sum"))
    assert _server_loss(summed, "sum") == pytest.approx(-(1 + 1 - 0.5 - 0.5) / 4)


def test_sft_row_weights_sum_to_a_batch_token_mean():
    row = sft_row([1, 2, 3, 4], [False, False, True, True], server="sum", batch_tokens=4)
    assert row.weights == pytest.approx([0.0, 0.25, 0.25]) and row.tokens == [1, 2, 3, 4]
    # SkyRL's server divides by the weights' sum: weights stay the mask, any scale would cancel
    row = sft_row([1, 2, 3, 4], [False, False, True, True], server="sequence_mean", batch_tokens=4)
    assert row.weights == [0.0, 1.0, 1.0]


def _server_loss(rows, server):
    """What each server minimises at ratio 1 (importance sampling): -sum(A w), or the mean over sequences of
    -sum(A w) / sum(w) (skyrl/backends/jax.py)."""
    per_row = [-sum(a * w for a, w in zip(r.advantages, r.weights)) for r in rows]
    if server == "sum":
        return sum(per_row)
    return sum(p / sum(r.weights) for p, r in zip(per_row, rows)) / len(rows)


def test_loss_and_refusals_follow_the_config():
    cfg = TrainConfig()
    name, extra = loss_for(cfg.algo)
    assert name in ("ppo", "importance_sampling", "cispo")
    if extra:
        assert extra["clip_low_threshold"] == pytest.approx(1 - cfg.algo.eps_clip_low)
    assert refusal(cfg) is None  # the quickstart's full fine-tune trains a LoRA on Tinker
    cfg.algo.kl_coef = 0.1
    assert "KL" in (refusal(cfg) or "")
    cfg.algo.kl_coef, cfg.algo.policy_loss = 0.0, "gspo"
    assert "no such loss" in (refusal(cfg) or "")
