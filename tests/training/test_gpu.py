"""The training paths on a CUDA model (skipped without a GPU; `bench/gpu_check.sh OUT tests` runs them there).

The first GPU run found SFT and GRPO feeding CPU-built batches to a CUDA model, which no CPU test can see:
these compare each path on the GPU with the same path on the CPU. MCPRL_GPU_TEST_MODEL names the model of the
tests that load one (default: the default model; gpu_check.sh passes a random model of its shape, since the
GGUF cannot travel to a machine with no package index).
"""

import copy
import math
import os

import pytest
import torch

from mcprl.training import grpo, trainer
from mcprl.training.checkpoint import STATE_FILE, TrainState
from mcprl.training.config import AlgoConfig
from mcprl.inference.engine import generate_batch
from mcprl.models.loading import DEFAULT_MODEL, load_model
from mcprl.training.reference import kl_reference
from mcprl.training.sft import sft_step

from .test_grpo import _batch
from .test_inference import QUESTIONS, chat, teacher_forced_logprobs
from .test_reference import KL, _lora, _params, _update
from .test_sft import _demo
from .test_trainer_smoke import config, rows
from .tiny_model import tiny_llama

MODEL = os.environ.get("MCPRL_GPU_TEST_MODEL", DEFAULT_MODEL)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _grads(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten().cpu() for p in model.parameters() if p.grad is not None])


def test_sft_step_on_cuda_matches_the_cpu():
    cpu = tiny_llama()
    gpu = copy.deepcopy(cpu).cuda()
    batch = [_demo(24, 9, 0), _demo(18, 6, 1)]
    for detach in ("none", "prompt", "context"):
        cpu.zero_grad(), gpu.zero_grad()
        want = sft_step(cpu, batch, 0, micro_batch_size=2, bf16=False, detach=detach)
        got = sft_step(gpu, batch, 0, micro_batch_size=2, bf16=False, detach=detach)
        assert got["sft_loss"] == pytest.approx(want["sft_loss"], abs=1e-4)
        torch.testing.assert_close(_grads(gpu), _grads(cpu), atol=1e-4, rtol=1e-3)


def test_grpo_update_on_cuda_matches_the_cpu():
    cpu = tiny_llama()
    gpu = copy.deepcopy(cpu).cuda()
    batch = _batch(cpu, [1.0, 0.0, 1.0, 1.0])
    algo = AlgoConfig(kl_coef=0.01, use_kl_loss=True)
    results = []
    for model in (cpu, gpu):
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
        before = [p.detach().clone() for p in model.parameters()]
        metrics = grpo.update(model, copy.deepcopy(batch), grpo.skyrl_algorithm_config(algo, 1.0), algo, opt, sched,
                              pad_id=0, temperature=1.0, bf16=False, ref_model=copy.deepcopy(model).eval())
        step = torch.cat([(b - p.detach()).flatten().cpu() for b, p in zip(before, model.parameters())])
        results.append((metrics, step))
    (want, want_step), (got, got_step) = results
    for key in ("policy_loss", "ratio_mean", "kl", "entropy", "grad_norm", "active_rows"):
        assert got[key] == pytest.approx(want[key], abs=1e-4), key
    torch.testing.assert_close(got_step, want_step, atol=1e-4, rtol=1e-3)


def test_kl_reference_on_cuda_is_the_warm_start_on_the_policys_device(tmp_path):
    """A trained adapter's merged copy, and a resume's copy loaded from the warm start, stay on the GPU and
    give the warm start's logprobs (a CPU-side reference would fail the first KL pass)."""
    model = _lora(tiny_llama()).cuda()
    _update(model, None)  # the adapter is trained now, as after a LoRA warm start
    ref = kl_reference(model, KL.kl_coef, TrainState(phase="grpo"), "unused")
    assert {p.device.type for p in ref.parameters()} == {"cuda"}
    batch = _batch(model, [1.0, 0.0, 0.0, 1.0])
    rows = list(range(batch.size))
    mine = grpo.current_logprobs(model, batch, rows, 0, temperature=1.0, bf16=False, micro_batch_size=4)
    theirs = grpo.reference_logprobs(model, batch, rows, 0, temperature=1.0, bf16=False, ref_model=ref,
                                     micro_batch_size=4)
    torch.testing.assert_close(theirs, mine, atol=1e-5, rtol=0)
    assert _update(model, ref)["ref_kl"] == pytest.approx(0.0, abs=1e-6)
    assert _update(model, ref)["ref_kl"] > 1e-6

    start = tmp_path / "step_grpo_0"
    full = tiny_llama()
    full.save_pretrained(start / "model")
    (start / STATE_FILE).write_text("{}")
    trained = copy.deepcopy(full).cuda()
    _update(trained, copy.deepcopy(trained).eval())
    ref = kl_reference(trained, KL.kl_coef, TrainState(phase="grpo", sft_step=4, grpo_step=1, warm_start=str(start)),
                       "unused")
    assert {p.device.type for p in ref.parameters()} == {"cuda"}
    torch.testing.assert_close(_params(ref).cpu(), _params(full))


def test_engine_logprobs_on_cuda_are_the_trainers():
    model, tokenizer = load_model(MODEL, dtype="float32", device="cuda")
    prompts = [chat(tokenizer, q) for q in QUESTIONS]
    outputs = generate_batch(model, tokenizer, prompts, {"temperature": 0, "max_tokens": 8})
    model.cpu()
    for prompt, out in zip(prompts, outputs):
        want = teacher_forced_logprobs(model, prompt, out.token_ids, 1.0)
        assert max(abs(a - b) for a, b in zip(out.logprobs, want.tolist())) < 1e-3


@pytest.mark.parametrize("kl", [[], ["algo.kl_coef=0.1", "algo.use_kl_loss=true"]], ids=["no-kl", "kl"])
def test_gpu_config_shape_trains_on_cuda(tmp_path, kl):
    """configs/gpu.yaml's choices on the default model: LoRA, gradient checkpointing, bf16; with a KL to the
    warm start, whose reference (the SFT adapter merged) must live on the GPU beside the policy."""
    cfg = config(tmp_path, "gpu", f"model.name={MODEL}", "model.device=cuda", "model.dtype=bfloat16",
                 "finetune.mode=lora", "finetune.gradient_checkpointing=true", "eval.before=false", *kl)
    summary = trainer.train(cfg)
    metrics = rows(tmp_path / "gpu")
    assert all(math.isfinite(r["sft_loss"]) for r in metrics if r["phase"] == "sft")
    assert all(math.isfinite(r["policy_loss"]) and r["rollout_tok_s"] > 0 for r in metrics if r["phase"] == "grpo")
    assert (tmp_path / "gpu" / "checkpoints" / "latest").read_text() == "step_done"
    assert {"eval_sft", "eval_grpo"} <= set(summary)
    if kl:
        assert all(math.isfinite(r["ref_kl"]) for r in metrics if r["phase"] == "grpo")
