"""`experimental.expert_guidance`: in a group whose rollouts all failed, the task's demo (replayed through the real env
and servers) takes the last rollout's place, and the update trains it at ratio 1 with the group's advantage."""

import copy
import json
import math

import pytest
import torch

from mcprl.data.rules import generate
from mcprl.metric_names import short
from mcprl.training import grpo
from mcprl.training.checkpoint import TrainState
from mcprl.training.config import AlgoConfig, DynamicSamplingConfig, env_config, load_train_config
from mcprl.training.experimental.guidance import GuidanceHook, add_expert_demos, demo_turns
from mcprl.training.loop.grpo import rollout_metrics, sample_step_batch
from mcprl.training.rollout import Rollouts
from tests.support.scripted import ScriptedClient, expert_policy

from .test_grpo import _batch, _update
from .tiny_model import tiny_llama

UNSURE = "<answer>I am not sure.</answer>"


@pytest.fixture(scope="module")
def tasks():
    return generate(3, seed=21, progress=False)


def rollouts_solving_only_the_first(tokenizer, tasks) -> Rollouts:
    expert = expert_policy(tasks.experts)
    first = tasks.samples[0].prompt[-1]["content"]
    policy = lambda question, turn: expert(question, turn) if question == first else UNSURE  # noqa: E731
    return Rollouts(ScriptedClient(tokenizer, policy), tokenizer, env_config=env_config(load_train_config(None)),
                    max_turns=6, max_input_length=4096, max_new_tokens=128)


def guided_step(tokenizer, tasks, demos):
    rollouts = rollouts_solving_only_the_first(tokenizer, tasks)
    sampling = rollouts.sampling(1.0)
    result = rollouts.run(tasks.samples, 2, sampling)
    uids = [f"{i // 2}:{g}" for i, g in enumerate(result.group_ids)]
    return result, add_expert_demos(rollouts, demos, sampling, result, uids)


def test_failed_groups_get_their_demo_replayed_through_the_env(tokenizer, tasks):
    result, output = guided_step(tokenizer, tasks, demo_turns(tasks.experts))
    assert [t["success"] for t in result.trajectories] == [True, True, False, False, False, False]
    assert len(result.output["rewards"]) == 6 and len(result.trajectories) == 6  # the policy's own, untouched
    assert all(len(output[k]) == 6 for k in ("prompt_token_ids", "response_ids", "rewards", "loss_masks",
                                              "rollout_logprobs", "stop_reasons", "env_metrics"))
    assert [g["task_id"] for g in result.guided] == [tasks.samples[1].task_id, tasks.samples[2].task_id]
    assert all(g["success"] and g["guided"] and g["num_turns"] >= 2 for g in result.guided)  # tools were called
    for i in (0, 1, 2, 4):  # the solved group and each failed group's first rollout stay
        assert output["response_ids"][i] is result.output["response_ids"][i]
    for demo, failure in ((3, 2), (5, 4)):  # the last rollout of each failed group is the demo now
        assert sum(output["rewards"][demo]) > sum(output["rewards"][failure])
        assert output["prompt_token_ids"][demo] == output["prompt_token_ids"][failure]
        assert output["env_metrics"][demo]["success"]
        logprobs, mask = output["rollout_logprobs"][demo], output["loss_masks"][demo]
        unknown = [i for i, lp in enumerate(logprobs) if math.isnan(lp)]
        assert unknown and all(mask[i] for i in unknown)  # the demo's tokens: no policy sampled them
        assert 0 < len(unknown) < len(mask)  # tool outputs are in the response but not trained


def test_no_demo_or_a_demo_that_fails_in_the_env_changes_nothing(tokenizer, tasks):
    demos = demo_turns(tasks.experts)
    del demos[tasks.samples[1].task_id]
    demos[tasks.samples[2].task_id] = ["<answer>0</answer>"]
    result, output = guided_step(tokenizer, tasks, demos)
    assert output["rewards"] == result.output["rewards"] and result.guided == []


def test_recovery_slips_are_not_replayed():
    slip = {"role": "assistant", "content": "<tool_call>bad</tool_call>", "weight": 0}
    expert = {"task_id": "t", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                                           slip, {"role": "user", "content": "error"},
                                           {"role": "assistant", "content": "<answer>1</answer>"}]}
    empty = {"task_id": "e", "messages": [{"role": "user", "content": "q"}]}
    assert demo_turns([expert, empty, {"messages": []}]) == {"t": ["<answer>1</answer>"]}


def test_a_demo_row_trains_at_ratio_one_and_raises_its_own_likelihood():
    model = tiny_llama()
    batch = _batch(model, [0.0, 1.0, 0.0, 0.0])
    own = batch.old_logprobs[1].clone()
    batch.old_logprobs[1] = torch.where(batch.loss_mask[1].bool(), math.nan, 0.0)
    demo = copy.deepcopy(batch)
    metrics, _ = _update(model, batch, detach="none")
    assert metrics["demo_rows"] == 1 and metrics["active_rows"] == 2
    assert torch.allclose(batch.old_logprobs[1], own, atol=1e-5)  # the policy's own logprobs before the step
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    after = grpo.current_logprobs(model, demo, [1], 0, temperature=1.0, bf16=False, micro_batch_size=1)[0]
    assert (after - own)[batch.loss_mask[1].bool()].sum() > 0


class FailingRollouts:
    """Every rollout fails with reward 0, so without guidance the filter keeps no group."""

    def run(self, tasks, n, sampling, on_episode=None):
        from mcprl.training.rollout import RolloutResult
        samples = [t for t in tasks for _ in range(n)]
        output = {"prompt_token_ids": [[1, 2]] * len(samples), "response_ids": [[3, 4]] * len(samples),
                  "rewards": [0.0] * len(samples), "loss_masks": [[1, 1]] * len(samples),
                  "stop_reasons": ["stop"] * len(samples), "rollout_logprobs": [[-0.5, -0.5]] * len(samples),
                  "rollout_metrics": {}}
        return RolloutResult(samples, [s.task_id for s in samples], output, [{"reward": 0.0, "success": False}] * len(samples))


def demo_guide(result, uids):
    """Each group's last rollout becomes a successful demo, as add_expert_demos does to failed groups."""
    last = {uid: i for i, uid in enumerate(uids)}
    result.guided = [{"reward": 1.0, "success": True, "guided": True} for _ in last]
    output = {k: list(v) if isinstance(v, list) else v for k, v in result.output.items()}
    for i in last.values():
        output["rewards"][i], output["rollout_logprobs"][i] = 1.0, [math.nan, math.nan]
    return output


def test_guided_groups_pass_the_dynamic_sampling_filter_and_stay_out_of_the_rollout_metrics(tasks):
    from types import SimpleNamespace

    algo = AlgoConfig(group_size=2, prompts_per_step=2, dynamic_sampling=DynamicSamplingConfig(type="filter"))
    policy = SimpleNamespace(rollouts=FailingRollouts())
    state = TrainState()
    output, uids, results = sample_step_batch(policy, algo, iter(tasks.samples), state, {}, guide=demo_guide)
    assert len(results) == 1 and state.grpo_prompts_drawn == 2  # no resampling: both groups now have variance
    assert len(uids) == 4 and output["rewards"] == [0.0, 1.0, 0.0, 1.0]
    assert rollout_metrics(results, 2)["success_rate"] == 0.0  # the policy's own episodes
    assert GuidanceHook(None).metrics(results) == {"guided_groups": 2.0}


@pytest.mark.slow
def test_a_real_run_trains_on_demos_where_the_base_model_fails(tmp_path):
    """The untrained model fails every task, so each group it samples trains on its task's demo."""
    from mcprl.eval.trajectory import load_trajectories
    from mcprl.training import trainer
    from mcprl.training.config import load_train_config

    data, run = tmp_path / "data", tmp_path / "run"
    cfg = load_train_config("configs/quickstart.yaml", [
        "data.generate.n_train=6", "data.generate.n_eval=1", f"data.train={data / 'train.jsonl'}",
        f"data.eval={data / 'test.jsonl'}", f"run.output_dir={run}", "sft.enabled=false", "eval.before=false",
        "eval.after_grpo=false", "algo.steps=1", "algo.prompts_per_step=2", "algo.group_size=2",
        "algo.prompts=all", "data.generate.no_demo_families=[]",  # every task has a demo to guide with
        "experimental.expert_guidance=true", "rollout.max_new_tokens=24", "logging.wandb.enabled=false",
        "logging.console_every=0", "model.threads=1"])
    trainer.train(cfg)
    step, = [short(json.loads(line)) for line in (run / "metrics.jsonl").read_text().splitlines() if '"grpo"' in line]
    assert step["success_rate"] == 0.0 and step["guided_groups"] == 2 and step["demo_rows"] == 2
    assert math.isfinite(step["policy_loss"]) and step["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    episodes = load_trajectories(run / "rollouts" / "grpo_step_1.jsonl")
    demos = [t for t in episodes if getattr(t, "guided", False)]
    assert len(episodes) == 6 and len(demos) == 2 and all(t.success for t in demos)
