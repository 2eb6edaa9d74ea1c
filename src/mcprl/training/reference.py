"""The KL reference: the policy GRPO started from, frozen.

After a warm start that is the SFT result, not the base model: a KL to the base would pull the policy
back towards a model that cannot call tools. A LoRA adapter still at its initialisation (B = 0, no SFT)
leaves the base model exact, so the reference is then the model with its adapter disabled and costs no
memory; otherwise it is a frozen copy (LoRA merged). A run resumed after GRPO's first step rebuilds it
from the checkpoint GRPO began from (`TrainState.warm_start`), or from the base model when there was none.
"""

from __future__ import annotations

import copy
from pathlib import Path

from peft import PeftModel
from transformers import PreTrainedModel

from mcprl.errors import ConfigError
from mcprl.models.loading import load_model
from mcprl.training.checkpoint import STATE_FILE, TrainState, load_weights


def adapter_untrained(model: PreTrainedModel) -> bool:
    """LoRA's B matrices start at zero, so until a step changes them the adapter adds nothing."""
    return isinstance(model, PeftModel) and all(
        not p.detach().any() for name, p in model.named_parameters() if "lora_B" in name)


def frozen_copy(model: PreTrainedModel, weights: Path | None = None) -> PreTrainedModel:
    ref = copy.deepcopy(model)
    if weights is not None:
        load_weights(weights, ref)
    if isinstance(ref, PeftModel):
        ref = ref.merge_and_unload()
    ref.eval()
    ref.requires_grad_(False)
    return ref


def kl_reference(model: PreTrainedModel, kl_coef: float, state: TrainState, base_model: str) -> PreTrainedModel | None:
    """The frozen reference, or None when there is none to keep (KL off, or the disabled adapter is exact).
    `model` holds the weights GRPO has reached at `state.grpo_step`."""
    if kl_coef == 0:
        return None
    if state.grpo_step == 0:
        return None if adapter_untrained(model) else frozen_copy(model)
    if state.warm_start:
        start = Path(state.warm_start)
        if not (start / STATE_FILE).is_file():
            raise ConfigError(f"algo.kl_coef > 0: the KL reference is the checkpoint GRPO began from, {start}, and "
                              f"it is gone; restore it or set algo.kl_coef: 0")
        return frozen_copy(model, start)
    if state.sft_step:
        raise ConfigError("algo.kl_coef > 0: this checkpoint does not record the warm start GRPO began from "
                          "(it predates the KL reference); resume GRPO from the warm start's checkpoint instead")
    if isinstance(model, PeftModel):  # GRPO began from the untrained adapter: the base model
        return None
    device = str(next(model.parameters()).device)
    return frozen_copy(load_model(base_model, dtype="float32", device=device)[0])
