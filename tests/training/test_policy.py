"""Training the top layers only (LoRA adapters or full weights), and backward that stops below them."""

import re

import pytest
import torch

from mcprl.training.config import FinetuneConfig, LoraConfig
from mcprl.training.policy import lora_excluded_layers, wrap_for_finetune

from .tiny_model import tiny_llama


def test_excluded_layer_pattern_covers_exactly_the_lower_layers():
    pattern = lora_excluded_layers(12, 4)
    assert all(re.fullmatch(pattern, f"model.layers.{i}.mlp.up_proj") for i in range(8))
    assert not any(re.fullmatch(pattern, f"model.layers.{i}.mlp.up_proj") for i in range(8, 12))
    assert not re.fullmatch(pattern, "model.layers.1x.mlp.up_proj")
    assert lora_excluded_layers(12, None) is None and lora_excluded_layers(12, 12) is None


def test_top_layers_adapts_only_the_top_and_backward_leaves_the_rest_untouched():
    model = wrap_for_finetune(tiny_llama(6), FinetuneConfig(mode="lora", top_layers=2,
                                                            lora=LoraConfig(r=4, alpha=8, target_modules=["q_proj", "down_proj"])))
    adapted = {int(m.group(1)) for name, _ in model.named_parameters() if "lora_" in name
               for m in [re.search(r"layers\.(\d+)\.", name)]}
    assert adapted == {4, 5}
    seen = []
    for i, layer in enumerate(model.get_base_model().model.layers):
        layer.register_full_backward_hook(lambda module, grad_in, grad_out, i=i: seen.append(i))
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():  # LoRA B starts at zero: nudge it so the adapters matter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    model(input_ids=ids, labels=ids).loss.backward()
    assert sorted(set(seen)) == [4, 5]  # no gradient flows below the lowest adapter
    assert all(p.grad is not None for name, p in model.named_parameters() if "lora_" in name)


@pytest.mark.parametrize("tied", [True, False])
def test_full_top_layers_trains_the_top_layers_and_final_norm_and_backward_stops_there(tied):
    model = wrap_for_finetune(tiny_llama(6, tied=tied), FinetuneConfig(mode="full", top_layers=2))
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    top = ("model.layers.4.", "model.layers.5.", "model.norm.")
    assert trained == {name for name, _ in model.named_parameters() if name.startswith(top)} | (set() if tied else {"lm_head.weight"})
    assert not model.get_input_embeddings().weight.requires_grad
    assert (model.lm_head.weight is model.get_input_embeddings().weight) == tied
    seen = []
    for i, layer in enumerate(model.model.layers):
        layer.register_full_backward_hook(lambda module, grad_in, grad_out, i=i: seen.append(i))
    ids = torch.randint(0, 64, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    assert sorted(set(seen)) == [4, 5]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters() if p.requires_grad)
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)


def test_full_without_top_layers_trains_every_weight():
    for top in (None, 6, 9):
        model = wrap_for_finetune(tiny_llama(6), FinetuneConfig(mode="full", top_layers=top))
        assert all(p.requires_grad for p in model.parameters())
