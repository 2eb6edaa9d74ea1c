"""The Tinker sampling engine against a fake `SamplingClient`: what it asks the server for (token ids,
stop strings with EOS as text, a seed per request) and what SkyRL's generator gets back."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from mcprl.inference.engine import UnsupportedSampling
from mcprl.inference.tinker_engine import TinkerSamplingEngine, TinkerServerGone, result
from mcprl.training.generator import make_generator

pytest.importorskip("tinker")


class FakeSampler:
    """Answers every prompt with `reply` (tokens of a tool call, then EOS), logprobs -0.5 each."""

    def __init__(self, tokenizer, reply: str, stop_reason: str = "stop"):
        self.calls: list[tuple[list[int], object]] = []
        self.tokens = tokenizer.encode(reply, add_special_tokens=False) + [tokenizer.eos_token_id]
        self.stop_reason = stop_reason

    def sample(self, prompt, num_samples, sampling_params):
        self.calls.append((prompt.to_ints(), sampling_params))
        future: Future = Future()
        future.set_result(SimpleNamespace(sequences=[SimpleNamespace(
            tokens=list(self.tokens), logprobs=[-0.5] * len(self.tokens), stop_reason=self.stop_reason)]))
        return future


def engine(tokenizer, sampler, **options) -> TinkerSamplingEngine:
    return TinkerSamplingEngine(sampler, tokenizer, context=2048, seed=0, max_wait_ms=50, **options)


def test_token_ids_in_and_ids_logprobs_stop_reasons_out(tokenizer):
    sampler = FakeSampler(tokenizer, '<tool_call>{"name": "add"}</tool_call> and more')
    out = asyncio.run(engine(tokenizer, sampler).generate({
        "prompt_token_ids": [[1, 2, 3], [4, 5]],
        "sampling_params": {"max_tokens": 24, "temperature": 0.7, "top_p": 0.9, "top_k": 20,
                            "stop": ["</tool_call>"], "logprobs": 0}}))
    assert sorted(c[0] for c in sampler.calls) == [[1, 2, 3], [4, 5]]
    params = sampler.calls[0][1]
    assert (params.max_tokens, params.temperature, params.top_p, params.top_k) == (24, 0.7, 0.9, 20)
    # no mixing of stop strings and ids on a Tinker sampler: EOS joins the strings as text
    assert params.stop == ["</tool_call>", tokenizer.eos_token]
    assert params.seed is not None and sampler.calls[0][1].seed != sampler.calls[1][1].seed
    assert out["response_ids"][0] == sampler.tokens  # the sampled tokens, all of them (SkyRL trains on these)
    assert out["responses"][0] == '<tool_call>{"name": "add"}</tool_call>'  # text cut after the stop string
    assert out["response_logprobs"][0] == [-0.5] * len(sampler.tokens)
    assert out["stop_reasons"] == ["stop", "stop"]


def test_seeded_engines_ask_for_the_same_samples(tokenizer):
    seeds = []
    for _ in range(2):
        sampler = FakeSampler(tokenizer, "hi")
        asyncio.run(engine(tokenizer, sampler).generate({"prompt_token_ids": [[1, 2]], "sampling_params": None}))
        seeds.append(sampler.calls[0][1].seed)
    assert seeds[0] == seeds[1]


def test_length_stop_and_a_new_sampler_after_a_weight_sync(tokenizer):
    first, second = FakeSampler(tokenizer, "a b c", stop_reason="length"), FakeSampler(tokenizer, "d")
    e = engine(tokenizer, first)
    out = asyncio.run(e.generate({"prompt_token_ids": [[7]], "sampling_params": {"max_tokens": 4}}))
    assert out["stop_reasons"] == ["length"]
    e.follow(second)
    asyncio.run(e.generate({"prompt_token_ids": [[8]], "sampling_params": None}))
    assert len(first.calls) == 1 and second.calls[0][0] == [8]


def test_what_tinker_cannot_sample_is_refused(tokenizer):
    e = engine(tokenizer, FakeSampler(tokenizer, "x"))
    with pytest.raises(UnsupportedSampling, match="min_p"):
        asyncio.run(e.generate({"prompt_token_ids": [[1]], "sampling_params": {"min_p": 0.1}}))
    with pytest.raises(UnsupportedSampling, match="min_tokens"):
        asyncio.run(e.generate({"prompt_token_ids": [[1]], "sampling_params": {"min_tokens": 5}}))


def test_skyrl_generator_runs_an_episode_over_it(tokenizer):
    """SkyRL's own generator, one mcp_tool_env episode answered at once: the engine fits its slot."""
    sampler = FakeSampler(tokenizer, "<answer>42</answer>")
    e = engine(tokenizer, sampler)
    generator = make_generator(e, tokenizer, max_turns=2, max_input_length=2048,
                               sampling={"max_generate_length": 16, "temperature": 1.0, "logprobs": 0,
                                         "stop": ["</answer>"]})
    from mcprl._skyrl import TrajectoryID
    from mcprl.envs import ENV_ID

    batch = {"prompts": [[{"role": "user", "content": "What is 6 times 7?"}]], "env_classes": [ENV_ID],
             "env_extras": [{"reward_spec": {"method": "rule", "ground_truth": {"answer": "42", "answer_type": "number"}},
                             "extra_info": {"tools": []}, "data_source": "test"}],
             "sampling_params": None, "trajectory_ids": [TrajectoryID(instance_id="t", repetition_id=0)],
             "batch_metadata": None}
    e.expect(1)
    out = asyncio.run(generator.generate(batch, disable_tqdm=True))
    assert out["response_ids"][0][:len(sampler.tokens)] == sampler.tokens
    assert out["rollout_logprobs"][0][:len(sampler.tokens)] == [-0.5] * len(sampler.tokens)
    assert sum(out["loss_masks"][0]) == len(sampler.tokens)


def test_a_request_to_a_server_that_died_fails_instead_of_waiting_for_ever():
    pending: Future = Future()  # the SDK retries a dead server's requests: this future never resolves
    with pytest.raises(TinkerServerGone, match="stopped"):
        result(pending, alive=lambda: False, poll_s=0.01)
    done: Future = Future()
    done.set_result(7)
    assert result(done, alive=lambda: False) == 7
