"""The Tinker server's sampler weights as a PEFT adapter on this machine: every LoRA tensor of the archive takes
effect, and an adapter whose config leaves some of its tensors out is refused instead of half applied.

SkyRL's server (0.3.0) writes adapter_config.json without target_modules; PEFT then adapts only its default
modules for a llama (q_proj, v_proj) and drops the rest with a warning, so evals of a Tinker-trained model ran
without 5 of its 7 adapted modules (docs/experiments/2026-12-06-tinker-quickstart-end-to-end.md)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save

from mcprl.training.checkpoint import CheckpointError
from mcprl.training.policy import load_policy_weights
from mcprl.training.tinker.run import export_adapter
from tests.training.tiny_model import tiny_llama

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


VOCAB = 49152  # the default tokenizer's, which the base directory carries


@pytest.fixture
def base(tmp_path, tokenizer) -> Path:
    assert len(tokenizer) == VOCAB
    out = tmp_path / "base"
    tiny_llama(vocab_size=VOCAB).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def server_archive() -> tuple[bytes, torch.Tensor]:
    """An archive as SkyRL's server writes one: PEFT keys for all seven modules, a config without
    target_modules; and the logits the adapted model gives (the server's model)."""
    model = get_peft_model(tiny_llama(vocab_size=VOCAB), LoraConfig(r=4, lora_alpha=8, target_modules=MODULES))
    torch.manual_seed(1)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.5)
    tokens = torch.tensor([[1, 5, 9, 40, 2]])
    with torch.no_grad():
        logits = model(tokens).logits
    weights = {k.replace(".default", ""): v.contiguous() for k, v in model.state_dict().items() if "lora_" in k}
    config = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "base_model_name_or_path": "Qwen/Qwen3-0.6B"}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("adapter_model.safetensors", save(weights)),
                           ("adapter_config.json", json.dumps(config).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue(), logits


def test_the_exported_adapter_gives_the_servers_model(tmp_path, base):
    archive, server_logits = server_archive()
    checkpoint = tmp_path / "ckpt"
    export_adapter(archive, checkpoint / "model", base_model=str(base))
    config = json.loads((checkpoint / "model" / "adapter_config.json").read_text())
    assert sorted(config["target_modules"]) == sorted(MODULES) and config["base_model_name_or_path"] == str(base)
    model, _ = load_policy_weights(str(checkpoint))
    with torch.no_grad():
        logits = model(torch.tensor([[1, 5, 9, 40, 2]])).logits
    assert torch.allclose(logits, server_logits, atol=1e-4), (logits - server_logits).abs().max()


def test_an_adapter_whose_config_leaves_out_modules_is_refused(tmp_path, base):
    archive, _ = server_archive()
    checkpoint = tmp_path / "ckpt"
    export_adapter(archive, checkpoint / "model", base_model=str(base))
    config_file = checkpoint / "model" / "adapter_config.json"
    config = json.loads(config_file.read_text())
    del config["target_modules"]  # as the server wrote it: PEFT's llama default, q_proj and v_proj
    config_file.write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as err:
        load_policy_weights(str(checkpoint))
    message = str(err.value)
    assert "\n" not in message and "['down_proj', 'gate_proj', 'k_proj', 'o_proj', 'up_proj']" in message
    assert str(config_file) in message


def test_a_saved_adapter_with_every_module_loads_unchanged(tmp_path, base):
    """mcprl's own LoRA checkpoints (target_modules written by PEFT) pass the check."""
    model = get_peft_model(tiny_llama(vocab_size=VOCAB), LoraConfig(r=4, lora_alpha=8, target_modules=MODULES))
    model.peft_config["default"].base_model_name_or_path = str(base)
    model.save_pretrained(tmp_path / "ckpt" / "model")
    loaded, _ = load_policy_weights(str(tmp_path / "ckpt"))
    assert sum("lora_A" in n for n, _ in loaded.named_parameters()) == 3 * len(MODULES)
