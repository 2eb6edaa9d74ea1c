"""GRPO's update on a tiny model: on-policy ratios of 1, zero-advantage groups skipped, the detached
prompt giving the same loss and ratios with a gradient that differs only in the prompt's path, and
`experimental.negative_weight` scaling only the advantages below a group's mean, and `experimental.credit: turn` training only
the turns where a group's episodes differed."""

import copy

import pytest
import torch
from transformers import LlamaForCausalLM

from mcprl.training import credit, grpo
from mcprl.training.config import AlgoConfig, ExperimentalConfig
from mcprl.training.logprobs import selected_token_logprobs

from .tiny_model import tiny_llama


def _batch(model: LlamaForCausalLM, rewards: list[float]) -> grpo.GRPOBatch:
    """Two rows per group, prompts of 9 and 6 tokens, responses whose middle (a tool output) is not trained;
    behaviour logprobs are the model's own, as a rollout engine on the same weights would return."""
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 64, (9 if i < 2 else 6,), generator=g).tolist() for i in range(len(rewards))]
    responses = [torch.randint(1, 64, (8,), generator=g).tolist() for _ in rewards]
    masks = [[1, 1, 1, 0, 0, 1, 1, 1] for _ in rewards]
    batch = grpo.build_batch({"prompt_token_ids": prompts, "response_ids": responses, "loss_masks": masks,
                              "rewards": rewards, "rollout_logprobs": [[0.0] * 8 for _ in rewards]},
                             [f"g{i // 2}" for i in range(len(rewards))])
    rows = list(range(batch.size))
    ids, attention, select = grpo.token_tensors(batch, rows, pad_id=0)
    with torch.no_grad():
        own = selected_token_logprobs(model, ids, attention, select).logprobs
    batch.old_logprobs = grpo.scatter_tokens(own.cpu(), batch.loss_mask)  # the batch lives on the CPU, as the trainer's
    return batch


def _update(model: LlamaForCausalLM, batch: grpo.GRPOBatch, **overrides) -> tuple[dict, torch.Tensor]:
    """`overrides` of AlgoConfig, or of ExperimentalConfig (detach, negative_weight, credit)."""
    if "detach" in overrides:
        overrides["grpo_detach"] = overrides.pop("detach")
    experimental = ExperimentalConfig(**{k: overrides.pop(k) for k in list(overrides)
                                         if k in ("grpo_detach", "negative_weight", "credit")})
    algo = AlgoConfig(**overrides)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    metrics = grpo.update(model, batch, grpo.skyrl_algorithm_config(algo, 1.0), algo, opt, sched, pad_id=0,
                          temperature=1.0, bf16=False, experimental=experimental)
    after = torch.cat([p.detach().flatten() for p in model.parameters()])
    return metrics, before - after  # lr 1 SGD: the step is the clipped gradient


def test_on_policy_ratios_are_one_and_solved_groups_carry_no_gradient():
    model = tiny_llama()
    metrics, step = _update(model, _batch(model, [1.0, 0.0, 1.0, 1.0]), detach="none")
    assert metrics["active_rows"] == 2  # the second group scored the same twice: no advantage
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["ratio_std"] == pytest.approx(0.0, abs=1e-3)
    assert step.norm() > 0


@pytest.mark.parametrize("detach", ["prompt", "context"])
def test_detached_update_keeps_loss_and_ratios_and_changes_only_the_gradient(detach):
    model = tiny_llama()
    batch = _batch(model, [1.0, 0.0, 0.0, 1.0])
    full, step_full = _update(copy.deepcopy(model), copy.deepcopy(batch), detach="none")
    split, step_split = _update(copy.deepcopy(model), copy.deepcopy(batch), detach=detach)
    for key in ("policy_loss", "ratio_mean", "ratio_std", "entropy", "trained_tokens", "active_rows"):
        assert split[key] == pytest.approx(full[key], abs=1e-5), key
    assert 0 < (step_split - step_full).norm() < step_full.norm()
    assert torch.nn.functional.cosine_similarity(step_split, step_full, dim=0) > 0.5


def test_ratio_std_resolves_the_tiny_spread_of_on_policy_ratios():
    """fp32 sampler and trainer agree to ~1e-6: the std must show that spread, not cancel to 0 (which
    would trip the health check) nor inflate it to float32 noise."""
    model = tiny_llama()
    batch = _batch(model, [1.0, 0.0, 0.0, 1.0])
    n = int(batch.loss_mask.sum())
    signs = torch.tensor([(-1.0) ** i for i in range(n)])
    batch.old_logprobs = batch.old_logprobs + 1e-6 * grpo.scatter_tokens(signs, batch.loss_mask)
    metrics, _ = _update(model, batch, detach="none")
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert metrics["ratio_std"] == pytest.approx(1e-6, rel=0.2)


def test_negative_weight_scales_only_the_advantages_below_the_group_mean():
    model = tiny_llama()
    batch = _batch(model, [1.0, 0.0, 0.0, 1.0])
    config = grpo.skyrl_algorithm_config(AlgoConfig(), 1.0)
    plain, _ = grpo.advantages(batch, config)
    half, _ = grpo.advantages(batch, config, negative_weight=0.5)
    assert (plain > 0).any() and (plain < 0).any()
    assert torch.equal(half[plain >= 0], plain[plain >= 0])
    assert torch.allclose(half[plain < 0], 0.5 * plain[plain < 0])
    metrics, step = _update(model, batch, negative_weight=0.0)
    assert metrics["active_rows"] == 2  # the two failed rows no longer train
    assert step.norm() > 0


def _traced(batch: grpo.GRPOBatch, turns: list[list[str]]) -> grpo.GRPOBatch:
    """The env's trace for each row: two turns (the rows' masks hold two runs of trained tokens)."""
    batch.turn_actions = [[credit.action_key({"kind": "tool_call", "tool": name, "arguments": {}}) for name in row]
                          for row in turns]
    return batch


def test_turn_credit_trains_only_the_turn_where_the_group_parted():
    """Group g0: both rows call `a` first, then `b` (solved) or `c` (failed): the first turn carries no
    advantage and the second the episode's. Group g1 took identical actions: nothing trains there."""
    model = tiny_llama()
    batch = _traced(_batch(model, [1.0, 0.0, 1.0, 0.0]), [["a", "b"], ["a", "c"], ["a", "b"], ["a", "b"]])
    config = grpo.skyrl_algorithm_config(AlgoConfig(), 1.0)
    episode, _ = grpo.advantages(batch, config)
    turn, kept = grpo.advantages(batch, config, credit="turn")
    assert kept == 0
    first, second = slice(0, 3), slice(5, 8)
    assert torch.equal(turn[:2, first], torch.zeros(2, 3))
    assert torch.allclose(turn[:2, second], episode[:2, second])
    assert torch.equal(turn[2:], torch.zeros_like(turn[2:]))
    metrics, step = _update(model, batch, credit="turn")
    assert metrics["active_rows"] == 2 and metrics["episode_credit_rows"] == 0
    assert step.norm() > 0


def test_turn_credit_keeps_the_episode_advantage_of_rows_whose_trace_does_not_match_their_turns():
    model = tiny_llama()
    batch = _traced(_batch(model, [1.0, 0.0, 1.0, 1.0]), [["a"], ["a", "c"], ["a", "b"], ["a", "b"]])
    config = grpo.skyrl_algorithm_config(AlgoConfig(), 1.0)
    episode, _ = grpo.advantages(batch, config)
    turn, kept = grpo.advantages(batch, config, credit="turn")
    assert kept == 1
    assert torch.equal(turn[0], episode[0])  # one trace entry for two turns: the episode advantage stays
    assert torch.equal(turn[1], torch.zeros_like(turn[1]))  # its own state alone: nothing to compare with
