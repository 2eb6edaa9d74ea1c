"""GRPO steps through SkyRL's dynamic sampling: which groups reach the update, and how many batches it costs."""

from types import SimpleNamespace

import pytest
from rich.progress import Progress

from mcprl.data.sample import SkyRLSample
from mcprl.training.checkpoint import TrainState
from mcprl.training.config import AlgoConfig, DynamicSamplingConfig
from mcprl.training.rollout import RolloutResult
from mcprl.training.loop.grpo import rollout_metrics, sample_step_batch


def task(name: str) -> SkyRLSample:
    return SkyRLSample("test", [{"role": "user", "content": name}], {"method": "rule", "ground_truth": {"task_id": name}})


class ScriptedRollouts:
    """Rewards by task name: 'mixed' tasks alternate 0/1 over a group, the others score `solved` for all."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def run(self, tasks, n, sampling, on_episode=None):
        self.batches.append([t.task_id for t in tasks])
        samples = [t for t in tasks for _ in range(n)]
        rewards = [float(i % 2) if s.task_id.startswith("mixed") else 1.0 for i, s in enumerate(samples)]
        output = {"prompt_token_ids": [[1, 2]] * len(samples), "response_ids": [[3, 4]] * len(samples),
                  "rewards": rewards, "loss_masks": [[1, 1]] * len(samples), "stop_reasons": ["stop"] * len(samples),
                  "rollout_logprobs": [[-0.5, -0.5]] * len(samples), "rollout_metrics": {},
                  "env_metrics": [{"task": s.task_id, "reward": r} for s, r in zip(samples, rewards)]}
        records = [{"reward": r, "success": r > 0} for r in rewards]
        for _ in samples if on_episode else ():
            on_episode()
        return RolloutResult(samples, [s.task_id for s in samples], output, records)


def step(names: list[str], ds: DynamicSamplingConfig, prompts: int = 2):
    rollouts = ScriptedRollouts()
    policy = SimpleNamespace(rollouts=rollouts)
    algo = AlgoConfig(group_size=2, prompts_per_step=prompts, dynamic_sampling=ds)
    state = TrainState()
    output, uids, results = sample_step_batch(policy, algo, iter([task(n) for n in names]), state, {})
    return output, uids, results, rollouts.batches, state


def test_without_dynamic_sampling_one_batch_trains_as_sampled():
    output, uids, results, batches, state = step(["solved-a", "mixed-b", "solved-c"], DynamicSamplingConfig(type=None))
    assert batches == [["solved-a", "mixed-b"]] and state.grpo_prompts_drawn == 2
    assert uids == ["0:solved-a", "0:solved-a", "1:mixed-b", "1:mixed-b"] and output["rewards"] == [1, 1, 0, 1]


def test_filter_samples_until_enough_groups_have_reward_variance():
    names = ["solved-a", "mixed-b", "solved-c", "solved-d", "mixed-e", "mixed-f"]
    output, uids, results, batches, state = step(names, DynamicSamplingConfig(type="filter", max_sample_batches=5))
    assert len(batches) == 3 and state.grpo_prompts_drawn == 6
    assert sorted(set(uids)) == ["1:mixed-b", "4:mixed-e"]  # truncated to prompts_per_step groups
    assert output["rewards"] == [0.0, 1.0, 0.0, 1.0]
    metrics = rollout_metrics(results, 2)  # over every sampled rollout, the dropped ones included
    assert metrics["sample_batches"] == 3 and metrics["frac_prompts_with_signal"] == pytest.approx(0.5)


def test_filter_that_runs_out_of_batches_trains_on_what_it_collected():
    names = ["solved-a", "mixed-b", "solved-c", "solved-d"]
    output, uids, _, batches, _ = step(names, DynamicSamplingConfig(type="filter", max_sample_batches=2))
    assert len(batches) == 2 and sorted(set(uids)) == ["1:mixed-b"]


def test_a_task_drawn_twice_in_one_step_makes_two_groups():
    output, uids, *_ = step(["mixed-a", "solved-b", "mixed-a", "solved-c"], DynamicSamplingConfig(type="filter"))
    assert sorted(set(uids)) == ["0:mixed-a", "2:mixed-a"]


def test_replace_copies_informative_groups_over_the_rest():
    output, uids, _, batches, _ = step(["mixed-a", "solved-b"], DynamicSamplingConfig(type="replace"))
    assert len(batches) == 1 and uids == ["0:mixed-a"] * 4 and output["rewards"] == [0.0, 1.0, 0.0, 1.0]


@pytest.mark.parametrize("ds", [DynamicSamplingConfig(type=None), DynamicSamplingConfig(type="filter", max_sample_batches=5),
                                DynamicSamplingConfig(type="replace")])
def test_each_kept_row_keeps_its_own_env_metrics(ds):
    """SkyRL's filter drops env_metrics and its replace leaves them stale; experimental.credit reads each row's trace."""
    output, uids, *_ = step(["solved-a", "mixed-b", "solved-c", "mixed-e", "mixed-f"], ds)
    assert [m["task"] for m in output["env_metrics"]] == [uid.split(":")[1] for uid in uids]
    assert [m["reward"] for m in output["env_metrics"]] == output["rewards"]


def test_replace_samples_again_when_too_few_groups_are_informative():
    names = ["solved-a", "solved-b", "mixed-c", "solved-d"]
    output, uids, _, batches, _ = step(names, DynamicSamplingConfig(type="replace", min_replace_ratio=0.3))
    assert len(batches) == 2 and set(uids) == {"2:mixed-c"}


def test_filter_survives_batches_in_a_row_without_any_informative_group():
    """SkyRL concatenates its (empty) collection with each new filtered batch and fails on two empties."""
    names = ["solved-a", "solved-b", "solved-c", "solved-d", "mixed-e", "solved-f"]
    output, uids, _, batches, _ = step(names, DynamicSamplingConfig(type="filter", max_sample_batches=3))
    assert len(batches) == 3 and sorted(set(uids)) == ["4:mixed-e"]
    assert output["rewards"] == [0.0, 1.0]


def test_filter_with_no_informative_group_at_all_trains_on_the_last_batch_as_sampled():
    names = [f"solved-{i}" for i in range(6)]
    output, uids, _, batches, _ = step(names, DynamicSamplingConfig(type="filter", max_sample_batches=3))
    assert len(batches) == 3 and sorted(set(uids)) == ["4:solved-4", "5:solved-5"]


def test_the_episode_bar_grows_with_each_sample_batch():
    names = ["solved-a", "mixed-b", "solved-c", "solved-d", "mixed-e", "mixed-f"]
    algo = AlgoConfig(group_size=2, prompts_per_step=2, dynamic_sampling=DynamicSamplingConfig(type="filter"))
    with Progress(disable=True) as bar:
        job = bar.add_task("rollouts", total=None)
        sample_step_batch(SimpleNamespace(rollouts=ScriptedRollouts()), algo, iter([task(n) for n in names]),
                          TrainState(), {}, (bar, job))
        (progress,) = bar.tasks
    assert progress.total == 12 and progress.completed == 12  # three batches of 2 prompts x 2 episodes
    assert progress.description == "rollouts (sample batch 3)"
