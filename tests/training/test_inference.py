"""The batched inference engine on the real SmolLM2-135M (few tokens per test), and its SkyRL wiring."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from mcprl.inference.engine import (
    HFInferenceEngine,
    PromptTooLong,
    SamplingParams,
    UnsupportedSampling,
    _length_buckets,
    _sample,
    generate_batch,
)
from mcprl.training.generator import make_generator
from mcprl.models.loading import DEFAULT_MODEL, load_model

SYSTEM = "You are a helpful assistant. Answer briefly; use the tools listed below when they help. " * 2
QUESTIONS = ["What is 2+2?", "Name a color.", "Write a haiku about the sea and the wind at night."]


@pytest.fixture(scope="module")
def smol():
    torch.set_num_threads(1)
    model, tokenizer = load_model(DEFAULT_MODEL, dtype="float32", device="cpu")
    return model, tokenizer


def chat(tokenizer, question: str, system: str = SYSTEM) -> list[int]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)


def teacher_forced_logprobs(model, prompt: list[int], completion: list[int], temperature: float) -> torch.Tensor:
    """What a trainer computes: log_softmax(model(ids).logits / T) at the completion's tokens."""
    ids = torch.tensor([prompt + completion])
    with torch.inference_mode():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    logprobs = (logits / temperature).log_softmax(-1)
    return logprobs.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


@pytest.mark.parametrize("shared_system_prompt", [True, False], ids=["shared-prefix", "left-padding-only"])
def test_batched_greedy_equals_unbatched(smol, shared_system_prompt: bool) -> None:
    model, tokenizer = smol
    systems = [SYSTEM] * 3 if shared_system_prompt else ["Be brief.", "You answer like a pirate would.", SYSTEM]
    prompts = [chat(tokenizer, q, s) for q, s in zip(QUESTIONS, systems)]
    assert len({len(p) for p in prompts}) == 3  # different lengths: rows are left-padded
    greedy = {"temperature": 0, "max_tokens": 8}
    batched = generate_batch(model, tokenizer, prompts, greedy)
    for prompt, together in zip(prompts, batched):
        (alone,) = generate_batch(model, tokenizer, [prompt], greedy)
        assert together.token_ids == alone.token_ids and together.text == alone.text
        assert max(abs(a - b) for a, b in zip(together.logprobs, alone.logprobs)) < 1e-4
    assert not model.training


def test_prefill_groups_rows_by_length_so_padding_stays_small() -> None:
    assert _length_buckets([500, 480, 100, 90, 20]) == [[0, 1], [2, 3], [4]]
    assert _length_buckets([40, 12, 30]) == [[0, 2, 1]]  # within 32 tokens: one forward


def test_repeated_and_uneven_prompts_prefill_apart_and_decode_as_if_alone(smol) -> None:
    """A GRPO group (the same prompt 3x) beside a much longer prompt: each distinct prompt is
    prefilled once in its own length bucket, and every row decodes as it would alone."""
    model, tokenizer = smol
    short = chat(tokenizer, QUESTIONS[0], "Be brief.")
    long = chat(tokenizer, QUESTIONS[2], SYSTEM * 4)
    assert len(long) > 2 * len(short) + 32
    greedy = {"temperature": 0, "max_tokens": 6}
    together = generate_batch(model, tokenizer, [short, long, short, short], greedy)
    for prompt, out in zip([short, long, short, short], together):
        (alone,) = generate_batch(model, tokenizer, [prompt], greedy)
        assert out.token_ids == alone.token_ids
        assert max(abs(a - b) for a, b in zip(out.logprobs, alone.logprobs)) < 1e-4


def test_decode_cache_with_room_regrows_and_drops_rows_like_a_concatenating_cache(smol, monkeypatch) -> None:
    """The decode cache writes into spare room instead of concatenating at every step; with room for two
    tokens it regrows mid-generation while rows of different lengths finish and leave the batch."""
    model, tokenizer = smol
    import mcprl.inference.engine as inference

    prompts = [chat(tokenizer, q) for q in QUESTIONS]
    sampling = {"temperature": 0.8, "max_tokens": 12, "stop": ["."]}
    monkeypatch.setattr(inference, "_SPARE_TOKENS", 2)
    roomy = generate_batch(model, tokenizer, prompts, sampling, generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(inference, "_with_room", lambda cache, room: cache)
    plain = generate_batch(model, tokenizer, prompts, sampling, generator=torch.Generator().manual_seed(3))
    assert len({len(out.token_ids) for out in plain}) > 1  # rows left the batch at different steps
    for a, b in zip(roomy, plain):
        assert a.token_ids == b.token_ids and a.stop_reason == b.stop_reason
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-5


def test_logprobs_match_a_teacher_forced_forward_fp32(smol) -> None:
    model, tokenizer = smol
    prompts = [chat(tokenizer, q) for q in QUESTIONS[:2]]
    engine = HFInferenceEngine(model, tokenizer, dtype="float32", seed=0)
    for temperature in (0.7, 0.0):
        for prompt, out in zip(prompts, engine.generate_batch(prompts, {"temperature": temperature, "max_tokens": 8})):
            expected = teacher_forced_logprobs(model, prompt, out.token_ids, temperature or 1.0)
            assert (torch.tensor(out.logprobs) - expected).abs().max() < 1e-3


def test_bf16_generation_logprobs_agree_with_an_autocast_trainer(smol) -> None:
    """The engine generates on a bf16 copy; the trainer keeps fp32 weights under bf16 autocast. Greedy
    tokens: sampled low-probability tokens sit at the bf16 noise floor (~0.05 even for autocast itself)."""
    model, tokenizer = smol
    engine = HFInferenceEngine(model, tokenizer, dtype="bfloat16", seed=0)
    assert engine.dtype == torch.bfloat16 and model.dtype == torch.float32
    prompts = [chat(tokenizer, q) for q in QUESTIONS[:2]]
    outs = engine.generate_batch(prompts, {"temperature": 0, "max_tokens": 12})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        diffs = torch.cat(
            [
                (torch.tensor(out.logprobs) - teacher_forced_logprobs(model, prompt, out.token_ids, 1.0)).abs()
                for prompt, out in zip(prompts, outs)
            ]
        )
    assert diffs.mean() < 0.05 and diffs.max() < 0.5


def test_stop_string_ends_its_row_and_is_included_while_others_continue(smol) -> None:
    model, tokenizer = smol
    prompts = [chat(tokenizer, q) for q in QUESTIONS[1:]]
    greedy = {"temperature": 0, "max_tokens": 12}
    free = generate_batch(model, tokenizer, prompts, greedy)
    words = free[0].text.split()
    stop = next(w for w in words[2:] if w not in free[1].text)  # occurs in row 0's output only
    stopped = generate_batch(model, tokenizer, prompts, {**greedy, "stop": [stop]})
    cut = free[0].text.index(stop) + len(stop)
    assert stopped[0].text == free[0].text[:cut] and stopped[0].stop_reason == "stop"
    assert free[0].token_ids[: len(stopped[0].token_ids)] == stopped[0].token_ids
    assert stop in tokenizer.decode(stopped[0].token_ids)
    assert len(stopped[0].token_ids) < len(free[0].token_ids)
    assert stopped[1].token_ids == free[1].token_ids and stopped[1].stop_reason == free[1].stop_reason


def test_stop_reasons_length_and_stop(smol) -> None:
    model, tokenizer = smol
    prompt = chat(tokenizer, QUESTIONS[2])
    (short,) = generate_batch(model, tokenizer, [prompt], {"temperature": 0, "max_tokens": 3})
    assert short.stop_reason == "length" and len(short.token_ids) == 3
    first = short.token_ids[0]
    (stopped,) = generate_batch(model, tokenizer, [prompt], {"temperature": 0, "stop_token_ids": [first]})
    assert stopped.stop_reason == "stop" and stopped.token_ids == [first]
    (eos,) = generate_batch(model, tokenizer, [prompt], {"temperature": 0, "min_tokens": 2, "stop_token_ids": [first]})
    assert len(eos.token_ids) > 1  # min_tokens forbids stop tokens at first


def test_seeded_sampling_is_reproducible(smol) -> None:
    model, tokenizer = smol
    prompts = [chat(tokenizer, q) for q in QUESTIONS[:2]]
    sampling = {"temperature": 1.0, "top_p": 0.95, "top_k": 50, "max_tokens": 6}
    engines = [HFInferenceEngine(model, tokenizer, dtype="float32", seed=7) for _ in range(2)]
    runs = [engine.generate_batch(prompts, sampling) for engine in engines]
    assert [o.token_ids for o in runs[0]] == [o.token_ids for o in runs[1]]


def test_each_session_samples_the_same_tokens_whatever_the_arrival_order(smol) -> None:
    """A group's episodes share their first prompt; which one draws which random numbers must not
    follow the order their turns reach the engine, or two seeded runs would swap their samples."""
    model, tokenizer = smol
    same, other = chat(tokenizer, QUESTIONS[2]), chat(tokenizer, QUESTIONS[0])
    sampling = {"temperature": 1.0, "max_tokens": 8}
    requests = {"t1_0": same, "t1_1": same, "t1_2": same, "t2_0": other}

    def run(order: list[str]) -> dict[str, list[int]]:
        engine = HFInferenceEngine(model, tokenizer, dtype="float32", seed=3)
        engine.expect(len(order))

        async def all_sessions():
            calls = [engine.generate({"prompt_token_ids": [requests[s]], "session_ids": [s], "sampling_params": sampling})
                     for s in order]
            return await asyncio.gather(*calls)

        outputs = asyncio.run(all_sessions())
        engine.close()
        assert engine.stats.batches == 1
        return {s: out["response_ids"][0] for s, out in zip(order, outputs)}

    forward, backward = run(list(requests)), run(list(reversed(requests)))
    assert forward == backward
    assert len({tuple(forward[s]) for s in ("t1_0", "t1_1", "t1_2")}) > 1  # the ties did sample apart


def test_sampler_distribution_and_truncation() -> None:
    generator = torch.Generator().manual_seed(0)
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().repeat(20000, 1)
    counts = torch.bincount(_sample(logits, SamplingParams(), generator), minlength=4) / 20000
    assert (counts - probs).abs().max() < 0.015
    top2 = _sample(logits, SamplingParams(top_k=2), generator)
    assert set(top2.tolist()) == {0, 1}
    nucleus = _sample(logits, SamplingParams(top_p=0.7), generator)  # 0.5 + 0.3 reach 0.7
    assert set(nucleus.tolist()) == {0, 1}
    assert _sample(logits[:3], SamplingParams(temperature=0), generator).tolist() == [0, 0, 0]


def test_concurrent_requests_are_batched_and_each_gets_its_own_result(smol) -> None:
    model, tokenizer = smol
    engine = HFInferenceEngine(model, tokenizer, dtype="float32")
    prompts = [chat(tokenizer, q) for q in QUESTIONS] + [chat(tokenizer, "Say hi.")]
    greedy = {"temperature": 0, "max_tokens": 5}
    few_tokens = {"temperature": 0, "max_tokens": 2}

    async def run():
        calls = [
            engine.generate({"prompt_token_ids": [p], "sampling_params": greedy if i % 2 else few_tokens})
            for i, p in enumerate(prompts)
        ]
        return await asyncio.gather(*calls)

    outputs = asyncio.run(run())
    assert engine.stats.requests == 4 and engine.stats.batches == 2  # one batch per sampling configuration
    for i, (prompt, output) in enumerate(zip(prompts, outputs)):
        (alone,) = generate_batch(model, tokenizer, [prompt], greedy if i % 2 else few_tokens)
        assert output["response_ids"] == [alone.token_ids] and output["responses"] == [alone.text]
        assert output["stop_reasons"] == [alone.stop_reason] and len(output["response_logprobs"][0]) == len(
            alone.token_ids
        )
    assert engine.stats.generated_tokens == sum(len(o["response_ids"][0]) for o in outputs)
    assert engine.stats.prompt_tokens == sum(map(len, prompts))
    again = asyncio.run(engine.generate({"prompt_token_ids": [prompts[1]], "sampling_params": greedy}))
    assert again["response_ids"] == outputs[1]["response_ids"]  # a new event loop (one per trainer step)
    engine.close()


def test_turns_reuse_cached_keys_values_and_weight_changes_drop_them(smol) -> None:
    model, tokenizer = smol
    prompts = [chat(tokenizer, q) for q in QUESTIONS[:2]]
    observation = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tool result: 42."}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    greedy = {"temperature": 0, "max_tokens": 6}
    cached = HFInferenceEngine(model, tokenizer, dtype="float32")
    fresh = HFInferenceEngine(model, tokenizer, dtype="float32", prefix_cache_mb=0)
    first = cached.generate_batch(prompts, greedy)
    second_prompts = [p + o.token_ids + observation for p, o in zip(prompts, first)]
    second = cached.generate_batch(second_prompts, greedy)
    assert cached.prefix_cache.reused_tokens == sum(len(p) + len(o.token_ids) - 1 for p, o in zip(prompts, first))
    for again, ref in zip(second, fresh.generate_batch(second_prompts, greedy)):
        assert again.token_ids == ref.token_ids
        assert max(abs(a - b) for a, b in zip(again.logprobs, ref.logprobs)) < 1e-4
    assert len(cached.prefix_cache) == 2  # each turn's entry replaced the one it extended
    with torch.no_grad():
        model.model.norm.weight.mul_(1.0)  # an optimizer step, as far as version counters can tell
    cached.generate_batch(prompts[:1], {"max_tokens": 1})
    assert len(cached.prefix_cache) == 1  # only the entry computed with the new weights


def test_fp32_engine_generates_on_a_column_major_copy_that_follows_updates(smol) -> None:
    """In fp32 the engine decodes on a copy whose Linear weights are stored [in, out] (faster GEMMs
    at a few rows): the same tokens as the trainer's own model, and it follows an optimizer step."""
    base, tokenizer = smol
    model = copy.deepcopy(base)
    engine = HFInferenceEngine(model, tokenizer, dtype="float32")
    prompts = [chat(tokenizer, q) for q in QUESTIONS]
    greedy = {"temperature": 0, "max_tokens": 8}

    def same_as_the_model() -> None:
        for out, ref in zip(engine.generate_batch(prompts, greedy), generate_batch(model, tokenizer, prompts, greedy)):
            assert out.token_ids == ref.token_ids
            assert max(abs(a - b) for a, b in zip(out.logprobs, ref.logprobs)) < 1e-4

    same_as_the_model()
    generating = engine._weights.copy
    assert generating is not None and generating is not model
    linears = [m for m in generating.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.t().is_contiguous() and not m.weight.is_contiguous() for m in linears)
    assert generating.lm_head.weight.data_ptr() == generating.model.embed_tokens.weight.data_ptr()  # still tied
    assert all(p.is_contiguous() for p in model.parameters())  # the trainer's weights keep their layout
    before = engine.generate_batch(prompts, greedy)
    with torch.no_grad():  # in place, as an optimizer step updates parameters
        for layer in model.model.layers:
            layer.mlp.down_proj.weight.mul_(1.5)
    same_as_the_model()
    assert [o.logprobs for o in engine.generate_batch(prompts, greedy)] != [o.logprobs for o in before]


def test_lora_model_and_bf16_copy_follow_adapter_updates(smol) -> None:
    from peft import LoraConfig, get_peft_model

    base, tokenizer = smol
    peft_model = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    engine = HFInferenceEngine(peft_model, tokenizer, dtype="bfloat16")
    prompts = [chat(tokenizer, q) for q in QUESTIONS[:2]]
    greedy = {"temperature": 0, "max_tokens": 8}
    lora_b = [p for name, p in peft_model.named_parameters() if "lora_B" in name]
    torch.manual_seed(0)
    deltas = [torch.randn_like(p) * 0.2 for p in lora_b]

    def shift(sign: int) -> None:  # in place, as an optimizer step updates parameters
        with torch.no_grad():
            for param, delta in zip(lora_b, deltas):
                param.add_(sign * delta)

    before = engine.generate_batch(prompts, greedy)  # the bf16 copy now exists and has been used
    shift(+1)
    after = engine.generate_batch(prompts, greedy)
    # A new engine copies and merges the updated adapter from scratch: the synced copy must match it
    # exactly (same bf16 weights, same batch), and the update must be big enough to show.
    fresh = HFInferenceEngine(peft_model, tokenizer, dtype="bfloat16").generate_batch(prompts, greedy)
    for synced, ref in zip(after, fresh):
        assert synced.token_ids == ref.token_ids
        assert max(abs(a - b) for a, b in zip(synced.logprobs, ref.logprobs)) < 1e-5
    assert [o.token_ids for o in before] != [o.token_ids for o in fresh] or max(
        abs(a - b) for o, n in zip(before, fresh) for a, b in zip(o.logprobs, n.logprobs)
    ) > 0.1
    fp32_engine = HFInferenceEngine(peft_model, tokenizer, dtype="float32")
    batched = fp32_engine.generate_batch(prompts, greedy)
    assert [o.token_ids for o in batched] == [fp32_engine.generate_batch([p], greedy)[0].token_ids for p in prompts]


def test_sampling_dicts_from_skyrl_and_bad_values() -> None:
    import mcprl._skyrl  # noqa: F401
    from skyrl.backends.skyrl_train.inference_servers.engine_utils import get_vllm_sampling_params
    from skyrl.train.config import SamplingParams as SkyRLSamplingParams

    skyrl = get_vllm_sampling_params(SkyRLSamplingParams(max_generate_length=32, temperature=0.7, stop=["</a>"]))
    parsed = SamplingParams.from_dict(skyrl)
    assert (parsed.max_tokens, parsed.temperature, parsed.stop, parsed.min_tokens, parsed.logprobs) == (
        32,
        0.7,
        ("</a>",),
        1,
        True,
    )
    assert SamplingParams.from_dict({"max_generate_length": 5, "logprobs": None}) == SamplingParams(
        max_tokens=5, logprobs=False
    )
    with pytest.raises(UnsupportedSampling, match="frequency_penalty"):
        SamplingParams.from_dict({"frequency_penalty": 0.5})
    with pytest.raises(UnsupportedSampling, match="n=2"):
        SamplingParams.from_dict({"n": 2})
    with pytest.raises(UnsupportedSampling, match="top_p"):
        SamplingParams.from_dict({"top_p": 0})


def test_prompt_longer_than_the_context_is_refused_and_fails_alone(smol) -> None:
    model, tokenizer = smol
    with pytest.raises(PromptTooLong, match="8192"):
        generate_batch(model, tokenizer, [[1] * 8192], {"max_tokens": 1})
    engine = HFInferenceEngine(model, tokenizer, dtype="float32")

    async def run():
        one_token = {"max_tokens": 1}
        calls = [engine.generate({"prompt_token_ids": [p], "sampling_params": one_token}) for p in ([1] * 9000, [1, 2])]
        return await asyncio.gather(*calls, return_exceptions=True)

    too_long, fine = asyncio.run(run())
    assert isinstance(too_long, PromptTooLong) and len(fine["response_ids"][0]) == 1


def _register_two_turn_env() -> str:
    """Any action gets a fixed observation; the episode ends after two turns with reward 1."""
    from skyrl_gym.envs import register
    from skyrl_gym.envs.base_text_env import BaseTextEnv

    class TwoTurnEnv(BaseTextEnv):
        def __init__(self, env_config=None, extras=None):
            super().__init__()
            self.max_turns = 2

        def step(self, action: str):
            self.turns += 1
            done = self.turns >= self.max_turns
            observations = [] if done else [{"role": "user", "content": "Tool result: 42"}]
            return {"observations": observations, "reward": float(done), "done": done, "metadata": {}}

    try:
        register(id="mcprl_test_two_turns", entry_point=TwoTurnEnv)
    except Exception:  # registered by an earlier test in this process
        pass
    return "mcprl_test_two_turns"


def test_engine_drives_skyrl_gym_generator_end_to_end(smol) -> None:
    import mcprl._skyrl  # noqa: F401

    model, tokenizer = smol
    env_id = _register_two_turn_env()
    engine = HFInferenceEngine(model, tokenizer, seed=0)
    generator = make_generator(
        engine,
        tokenizer,
        max_turns=2,
        max_input_length=1024,
        sampling={"max_generate_length": 8, "temperature": 1.0, "stop": ["</answer>"]},
    )
    questions = [[{"role": "user", "content": f"What is {i} + 1?"}] for i in range(4)]
    batch = {
        "prompts": questions,
        "env_classes": [env_id] * 4,
        "env_extras": [{} for _ in questions],
        "sampling_params": None,
        "trajectory_ids": None,
        "batch_metadata": None,
    }
    out = asyncio.run(generator.generate(batch, disable_tqdm=True))

    assert engine.stats.requests == 8 and engine.stats.batches < 8  # 4 trajectories x 2 turns, batched
    assert len(out["response_ids"]) == 4
    for question, prompt, response, mask, logprobs, rewards, reason in zip(
        questions,
        out["prompt_token_ids"],
        out["response_ids"],
        out["loss_masks"],
        out["rollout_logprobs"],
        out["rewards"],
        out["stop_reasons"],
    ):
        assert prompt == tokenizer.apply_chat_template(
            question, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert len(response) == len(mask) == len(logprobs) == len(rewards)
        assert 0 in mask and mask[0] == 1 and mask[-1] == 1  # observation tokens are masked out
        assert all(lp <= 0 for lp in logprobs) and rewards[-1] == 1.0 and sum(rewards) == 1.0
        assert reason in ("stop", "length")
        assert "Tool result: 42" in tokenizer.decode(response)
    engine.close()


def test_vllm_smoke_skips_cleanly_without_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from mcprl.training import vllm_smoke

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here: `make smoke-vllm` runs the real path")
    assert vllm_smoke.main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("vllm is not installed") and out[0].endswith("SKIPPED")
