"""SFT's detached prompt and context: the same loss, a gradient that skips their activations, and guard rails."""

import pytest
import torch

from mcprl.training.logprobs import detachable_prefix, selected_token_logprobs
from mcprl.training.sft import SFTExample, collate, noisy_embeddings, sft_step

from .tiny_model import tiny_llama


def _spans_demo(n: int, seed: int, trained: list[tuple[int, int]]) -> SFTExample:
    """n random tokens, trained on the [start, end) spans: turns of the model's own between context."""
    ids = torch.randint(1, 64, (n,), generator=torch.Generator().manual_seed(seed)).tolist()
    return SFTExample(ids, [any(a <= i < b for a, b in trained) for i in range(n)])


def _demo(n: int, first: int, seed: int) -> SFTExample:
    return _spans_demo(n, seed, [(first, n)])


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
    split = selected_token_logprobs(model, ids, attention, select, detach="prompt")
    torch.testing.assert_close(split.logprobs, full.logprobs, atol=1e-5, rtol=1e-5)

    full_loss = sft_step(model, batch, 0, micro_batch_size=2, bf16=False)
    g_full = _grads(model).clone()
    model.zero_grad()
    split_loss = sft_step(model, batch, 0, micro_batch_size=2, bf16=False, detach="prompt")
    g_split = _grads(model)
    assert split_loss["sft_loss"] == pytest.approx(full_loss["sft_loss"], abs=1e-5)
    assert 0 < (g_split - g_full).norm() < g_full.norm()  # same direction mostly, not the same vector
    cos = torch.nn.functional.cosine_similarity(g_split, g_full, dim=0)
    assert cos > 0.5


def _keys_values_constant_except(model, keep: torch.Tensor) -> list:
    """Hooks making every layer's keys and values constants except at `keep` positions [B, T]: the gradient
    `detach="context"` promises, built from a plain forward pass."""
    def hook(_module, _inputs, out):
        return torch.where(keep[..., None], out, out.detach())
    return [layer.self_attn.k_proj.register_forward_hook(hook) for layer in model.model.layers] + [
        layer.self_attn.v_proj.register_forward_hook(hook) for layer in model.model.layers]


def test_detached_context_keeps_the_loss_and_trains_only_through_the_positions_that_predict():
    """Two turns with a tool result between them, rows of different lengths (right padding): the loss is
    the full forward's, and the gradient is the full forward's with every other position's keys and
    values held constant: the second turn still trains through the first turn's keys and values."""
    model = tiny_llama()
    batch = [_spans_demo(30, 0, [(8, 12), (20, 25)]), _spans_demo(22, 1, [(5, 9), (15, 19)])]
    ids, attention, select = collate(batch, pad_id=0)
    full = selected_token_logprobs(model, ids, attention, select)
    context = selected_token_logprobs(model, ids, attention, select, detach="context")
    torch.testing.assert_close(context.logprobs, full.logprobs, atol=1e-5, rtol=1e-5)

    context.logprobs.sum().backward()
    g_context = _grads(model).clone()
    model.zero_grad()
    predicts = torch.zeros_like(select)
    predicts[:, :-1] = select[:, 1:]
    hooks = _keys_values_constant_except(model, predicts)
    selected_token_logprobs(model, ids, attention, select).logprobs.sum().backward()
    for h in hooks:
        h.remove()
    torch.testing.assert_close(_grads(model), g_context, atol=1e-5, rtol=1e-4)
    model.zero_grad()
    full.logprobs.sum().backward()
    assert (_grads(model) - g_context).norm() > 1e-3  # the tool result's path is really gone


@pytest.mark.parametrize("detach", ["prompt", "context"])
def test_gradient_checkpointing_encodes_the_whole_row_with_gradient_instead_of_failing(detach):
    """Checkpointed layers drop the cache both detached forms need; they fall back to the exact gradient."""
    model = tiny_llama()
    batch = [_demo(24, 9, 0), _demo(18, 6, 1)]
    full_loss = sft_step(model, batch, 0, micro_batch_size=2, bf16=False)
    g_full = _grads(model).clone()
    model.zero_grad()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    loss = sft_step(model, batch, 0, micro_batch_size=2, bf16=False, detach=detach)
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


@pytest.mark.parametrize("detach", ["none", "prompt"])
def test_neftune_noise_changes_the_training_loss_only_inside_its_block(detach):
    """sft.neftune_alpha: noise on the embeddings of a train-mode forward inside the block, on the detached
    prompt's path too; none in eval mode (rollouts, evals) and none once the block is left."""
    model = tiny_llama(2)
    batch = [_demo(24, 10, seed=1)]

    def loss() -> float:
        model.zero_grad(set_to_none=True)
        return sft_step(model, batch, 0, micro_batch_size=1, bf16=False, detach=detach)["sft_loss"]

    model.train()
    clean = loss()
    with noisy_embeddings(model, 50.0):
        noisy = loss()
        model.eval()
        assert loss() == clean
        model.train()
    assert noisy != clean
    assert loss() == clean and not model.get_input_embeddings()._forward_hooks
    with noisy_embeddings(model, None):
        assert loss() == clean
