"""LoraSyncCallback's bookkeeping without vLLM: what is saved, which ids, when (tests/training/
test_vllm_engine.py checks the same against a real vLLM engine)."""

from __future__ import annotations

import torch
from peft import LoraConfig, get_peft_model
from peft.utils import get_peft_model_state_dict, set_peft_model_state_dict
from transformers import LlamaConfig, LlamaForCausalLM

from mcprl.inference.vllm_engine import LoraSyncCallback


class RecordingEngine:
    def __init__(self) -> None:
        self.refreshes: list[tuple[str, int]] = []

    def refresh_lora(self, path, int_id: int) -> None:
        self.refreshes.append((str(path), int_id))


def tiny_peft_model():
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1)
    return get_peft_model(LlamaForCausalLM(config), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))


def test_publishes_a_new_version_only_when_the_adapter_changed(tmp_path) -> None:
    model, engine = tiny_peft_model(), RecordingEngine()
    sync = LoraSyncCallback(model, engine, tmp_path / "adapters")
    assert sync() == tmp_path / "adapters" / "v1"  # first use: publish whatever the adapter holds
    assert (tmp_path / "adapters" / "v1" / "adapter_model.safetensors").exists()
    assert sync() is None and engine.refreshes == [(str(tmp_path / "adapters" / "v1"), 1)]

    lora_b = next(p for name, p in model.named_parameters() if "lora_B" in name)
    with torch.no_grad():
        lora_b.add_(1.0)  # an optimizer step
    assert sync() == tmp_path / "adapters" / "v2"
    assert sorted(p.name for p in (tmp_path / "adapters").iterdir()) == ["v2"]  # v1 deleted
    assert sync(force=True) == tmp_path / "adapters" / "v3"  # the trainer's sync_weights()

    state = {k: v + 1 for k, v in get_peft_model_state_dict(model).items()}
    set_peft_model_state_dict(model, state)  # a loaded checkpoint
    assert sync() == tmp_path / "adapters" / "v4"
    assert [i for _, i in engine.refreshes] == [1, 2, 3, 4]
    saved = get_peft_model_state_dict(model)
    reloaded = tiny_peft_model()
    reloaded.load_adapter(str(tmp_path / "adapters" / "v4"), adapter_name="default")
    assert all(torch.equal(saved[k], v) for k, v in get_peft_model_state_dict(reloaded).items())
