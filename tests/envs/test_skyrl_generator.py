"""SkyRL's real SkyRLGymGenerator over mcp_tool_env, against our real servers, with a scripted client."""

import asyncio

import pytest

import mcprl._skyrl  # noqa: F401
import mcprl.envs  # noqa: F401
from mcprl.data.rules import generate
from mcprl.training.generator import make_generator
from tests.support.scripted import ScriptedClient, expert_policy


@pytest.fixture(scope="module")
def three_turn_task():
    out = generate(40, seed=11, progress=False)
    for sample, expert in zip(out.samples, out.experts):
        turns = [m for m in expert["messages"] if m["role"] == "assistant"]
        if len(turns) == 3 and sample.ground_truth["answer"] is not None:
            return sample, expert
    raise AssertionError("no 3-turn task generated")


def run(tokenizer, sample, expert, max_input_length=4096):
    client = ScriptedClient(tokenizer, expert_policy([expert]))
    generator = make_generator(client, tokenizer, max_turns=6, max_input_length=max_input_length,
                               sampling={"max_generate_length": 128, "temperature": 1.0, "logprobs": 0})
    batch = {"prompts": [sample.prompt], "env_classes": ["mcp_tool_env"],
             "env_extras": [{"reward_spec": sample.reward_spec, "extra_info": sample.extra_info}],
             "sampling_params": None, "trajectory_ids": None, "batch_metadata": None}
    return asyncio.run(generator.generate(batch, disable_tqdm=True))


def test_three_turn_episode_masks_and_rewards(tokenizer, three_turn_task):
    sample, expert = three_turn_task
    out = run(tokenizer, sample, expert)
    ids, mask, rewards = out["response_ids"][0], out["loss_masks"][0], out["rewards"][0]
    assert len(ids) == len(mask) == len(rewards)
    model_text = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    tool_text = tokenizer.decode([t for t, m in zip(ids, mask) if not m])
    actions = [m["content"] for m in expert["messages"] if m["role"] == "assistant"]
    for action in actions:
        assert action in model_text  # the model's tokens: loss mask 1
    assert tool_text.count("<tool_response>") == 2 and "<tool_response>" not in model_text  # tool output: mask 0
    # per-step rewards sit on the last model token of each turn
    turn_ends = [i for i in range(len(mask)) if mask[i] and (i + 1 == len(mask) or not mask[i + 1])]
    assert len(turn_ends) == 3
    assert {i for i, r in enumerate(rewards) if r != 0} <= set(turn_ends)
    assert sum(rewards) >= 1.0  # solved
    assert out["env_metrics"][0]["success"] is True and out["stop_reasons"][0] == "stop"


def test_truncated_episode_is_handled(tokenizer, three_turn_task):
    sample, expert = three_turn_task
    prompt_len = len(tokenizer.apply_chat_template(sample.prompt, add_generation_prompt=True, tokenize=True,
                                                   return_dict=False))
    out = run(tokenizer, sample, expert, max_input_length=prompt_len + 40)
    assert out["stop_reasons"][0] == "length"
    ids, mask = out["response_ids"][0], out["loss_masks"][0]
    assert len(ids) == len(mask) and len(out["rewards"][0]) == len(ids)
    assert out["env_metrics"][0]["success"] is False
