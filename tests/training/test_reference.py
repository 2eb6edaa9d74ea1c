"""The KL reference is the policy GRPO started from, frozen: a copy for a full fine-tune or a trained
adapter, the disabled adapter while it is untrained, rebuilt from the warm start on resume."""

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model

from mcprl.training import grpo
from mcprl.training.checkpoint import STATE_FILE, TrainState
from mcprl.training.config import AlgoConfig, ConfigError
from mcprl.training.reference import kl_reference

from .test_grpo import _batch
from .tiny_model import tiny_llama

KL = AlgoConfig(kl_coef=0.5, use_kl_loss=True)


def _update(model, ref, rewards=(1.0, 0.0, 0.0, 1.0), algo=KL):
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    return grpo.update(model, _batch(model, list(rewards)), grpo.skyrl_algorithm_config(algo, 1.0), algo, opt, sched,
                       pad_id=0, temperature=1.0, bf16=False, ref_model=ref)


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _lora(model):
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))


def test_a_full_fine_tune_keeps_a_frozen_copy_the_updates_leave_behind():
    model = tiny_llama()
    ref = kl_reference(model, KL.kl_coef, TrainState(phase="grpo"), "unused")
    assert ref is not model and torch.equal(_params(ref), _params(model))
    assert not any(p.requires_grad for p in ref.parameters())
    first = _update(model, ref)  # the policy is still the reference: KL 0
    assert first["ref_kl"] == pytest.approx(0.0, abs=1e-7)
    assert not torch.equal(_params(ref), _params(model))
    assert _update(model, ref)["ref_kl"] > 1e-6  # sampled by the updated policy, measured against the start


def test_the_reference_pass_is_micro_batched_like_the_policys():
    """All of a step's rows in one reference forward would hold every row's activations at once (a GPU step
    of 128 long episodes); it takes algo.micro_batch_size rows at a time."""
    model = tiny_llama()
    ref = kl_reference(model, KL.kl_coef, TrainState(phase="grpo"), "unused")
    seen = []
    ref.model.register_forward_hook(lambda _m, _args, kwargs, _out: seen.append(kwargs["input_ids"].shape[0]),
                                    with_kwargs=True)
    _update(model, ref, algo=AlgoConfig(kl_coef=0.5, use_kl_loss=True, micro_batch_size=2))
    assert seen == [2, 2]


def test_kl_off_keeps_no_reference_and_logs_no_ref_kl():
    model = tiny_llama()
    assert kl_reference(model, 0.0, TrainState(phase="grpo"), "unused") is None
    assert "ref_kl" not in _update(model, None, algo=AlgoConfig())


def test_an_untrained_adapter_disables_itself_and_a_trained_one_is_merged_into_a_copy():
    model = _lora(tiny_llama())
    state = TrainState(phase="grpo")
    assert kl_reference(model, KL.kl_coef, state, "unused") is None  # B = 0: the base model is the reference
    assert _update(model, None)["ref_kl"] == pytest.approx(0.0, abs=1e-7)
    # After that step the adapter is trained (as after a LoRA warm start): a merged copy of it, not the base.
    ref = kl_reference(model, KL.kl_coef, state, "unused")
    assert ref is not None and not any("lora" in name for name, _ in ref.named_parameters())
    batch = _batch(model, [1.0, 0.0, 0.0, 1.0])
    rows = list(range(batch.size))
    mine = grpo.current_logprobs(model, batch, rows, 0, temperature=1.0, bf16=False, micro_batch_size=4)
    theirs = grpo.reference_logprobs(model, batch, rows, 0, temperature=1.0, bf16=False, ref_model=ref,
                                     micro_batch_size=4)
    base = grpo.reference_logprobs(model, batch, rows, 0, temperature=1.0, bf16=False, ref_model=None,
                                   micro_batch_size=4)
    torch.testing.assert_close(theirs, mine, atol=1e-5, rtol=0)
    assert (base - mine).abs().max() > 1e-4


def test_a_resumed_run_rebuilds_the_reference_from_the_checkpoint_grpo_began_from(tmp_path):
    start = tmp_path / "checkpoints" / "step_grpo_0"
    model = tiny_llama()
    model.save_pretrained(start / "model")
    (start / STATE_FILE).write_text("{}")
    trained = copy.deepcopy(model)
    _update(trained, copy.deepcopy(model).eval())
    state = TrainState(phase="grpo", sft_step=4, grpo_step=2, warm_start=str(start))
    ref = kl_reference(trained, KL.kl_coef, state, "unused")
    assert torch.equal(_params(ref), _params(model)) and not torch.equal(_params(ref), _params(trained))


def test_a_missing_warm_start_is_one_clear_error_not_a_silent_base_model_reference(tmp_path):
    gone = TrainState(phase="grpo", sft_step=4, grpo_step=2, warm_start=str(tmp_path / "step_grpo_0"))
    with pytest.raises(ConfigError, match="the KL reference is the checkpoint GRPO began from"):
        kl_reference(tiny_llama(), KL.kl_coef, gone, "unused")
    unrecorded = TrainState(phase="grpo", sft_step=4, grpo_step=2)
    with pytest.raises(ConfigError, match="does not record the warm start"):
        kl_reference(tiny_llama(), KL.kl_coef, unrecorded, "unused")


def test_without_a_warm_start_a_resume_takes_the_base_model_or_the_disabled_adapter():
    """GRPO without SFT began from the base model: a LoRA run's disabled adapter is it; a full fine-tune
    resumed mid-GRPO loads it again."""
    from mcprl.models.loading import DEFAULT_MODEL, load_model

    resumed = TrainState(phase="grpo", grpo_step=1)
    assert kl_reference(_lora(tiny_llama()), KL.kl_coef, resumed, "unused") is None
    model, _ = load_model(DEFAULT_MODEL, dtype="float32", device="cpu")
    base = _params(model).clone()
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # GRPO's steps so far
    ref = kl_reference(model, KL.kl_coef, resumed, DEFAULT_MODEL)
    assert torch.equal(_params(ref), base) and not any(p.requires_grad for p in ref.parameters())
