"""SFT's detached prompt: the same loss, a gradient that skips the prompt's activations, and guard rails."""

import pytest
import torch

from mcprl.training.logprobs import detachable_prefix, selected_token_logprobs
from mcprl.training.sft import SFTExample, collate, sft_step

from .tiny_model import tiny_llama


def _demo(n: int, first: int, seed: int) -> SFTExample:
    ids = torch.randint(1, 64, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
    return SFTExample(ids, [i >= first for i in range(n)])


def _grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def _prefix(batch: list[SFTExample]) -> int:
    return detachable_prefix(collate(batch, 0)[2])


def test_prefix_is_what_precedes_every_rows_first_trained_token():
    assert _prefix([_demo(20, 7, 0), _demo(14, 5, 1)]) == 4
    assert _prefix([_demo(20, 0, 0)]) == 0
    assert _prefix([SFTExample([1, 2, 3], [False] * 3)]) == 2


def test_detached_prefix_keeps_the_loss_and_changes_only_the_prompt_path_of_the_gradient():
    model = tiny_llama()
    batch = [_demo(24, 9, 0), _demo(18, 6, 1)]  # right-padded, different prompt lengths
    ids, attention, select = collate(batch, pad_id=0)
    full = selected_token_logprobs(model, ids, attention, select)
    split = selected_token_logprobs(model, ids, attention, select, detached_prefix=_prefix(batch))
    torch.testing.assert_close(split.logprobs, full.logprobs, atol=1e-5, rtol=1e-5)

    full_loss = sft_step(model, batch, 0, micro_batch_size=2, bf16=False)
    g_full = _grads(model).clone()
    model.zero_grad()
    split_loss = sft_step(model, batch, 0, micro_batch_size=2, bf16=False, detach_prompt=True)
    g_split = _grads(model)
    assert split_loss["sft_loss"] == pytest.approx(full_loss["sft_loss"], abs=1e-5)
    assert 0 < (g_split - g_full).norm() < g_full.norm()  # same direction mostly, not the same vector
    cos = torch.nn.functional.cosine_similarity(g_split, g_full, dim=0)
    assert cos > 0.5


def test_a_selected_token_inside_the_detached_prefix_is_refused():
    model = tiny_llama()
    ids, attention, select = collate([_demo(12, 3, 0)], pad_id=0)
    with pytest.raises(ValueError, match="detached prefix"):
        selected_token_logprobs(model, ids, attention, select, detached_prefix=5)


def test_gradient_checkpointing_encodes_the_whole_row_with_gradient_instead_of_failing():
    """Checkpointed layers drop the prefix cache; the detached prefix falls back to the exact gradient."""
    model = tiny_llama()
    batch = [_demo(24, 9, 0), _demo(18, 6, 1)]
    full_loss = sft_step(model, batch, 0, micro_batch_size=2, bf16=False)
    g_full = _grads(model).clone()
    model.zero_grad()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    loss = sft_step(model, batch, 0, micro_batch_size=2, bf16=False, detach_prompt=True)
    assert loss["sft_loss"] == pytest.approx(full_loss["sft_loss"], abs=1e-5)
    torch.testing.assert_close(_grads(model), g_full, atol=1e-5, rtol=1e-4)


def test_a_weight_0_message_stays_in_the_context_and_out_of_the_loss(tokenizer):
    from mcprl.training.sft import tokenize_conversation

    slip, fix = '<tool_call>{"name": "q", "arguments": {"t": "LLIN"}}</tool_call>', '<tool_call>{"name": "q", ' \
        '"arguments": {"t": "LIN"}}</tool_call>'
    messages = [{"role": "user", "content": "Price of LIN?"}, {"role": "assistant", "content": slip, "weight": 0},
                {"role": "user", "content": "unknown ticker 'LLIN'"}, {"role": "assistant", "content": fix},
                {"role": "user", "content": "42"}, {"role": "assistant", "content": "<answer>42</answer>"}]
    example = tokenize_conversation(messages, tokenizer, 1024)
    trained = tokenizer.decode([t for t, m in zip(example.input_ids, example.loss_mask) if m])
    assert tokenizer.decode(example.input_ids).count("LLIN") == 2  # the slip and its error are context
    assert "LLIN" not in trained and fix in trained and "<answer>42</answer>" in trained
    unweighted = tokenize_conversation([{k: v for k, v in m.items() if k != "weight"} for m in messages],
                                       tokenizer, 1024)
    assert unweighted.input_ids == example.input_ids and sum(unweighted.loss_mask) > sum(example.loss_mask)
