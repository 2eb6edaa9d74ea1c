"""`experimental.probe`: GRPO's prompts come from the task families the warm start fails on a greedy probe."""

from collections import Counter
from itertools import islice
from types import SimpleNamespace

import pytest

from mcprl.data.sample import SkyRLSample
from mcprl.training.checkpoint import TrainState
from mcprl.training.config import ExperimentalConfig, ProbeConfig, TrainConfig
from mcprl.training.experimental import grpo_hooks
from mcprl.training.loop.prompts import grpo_prompts
from mcprl.training.ordering import prompt_stream
from mcprl.training.rollout import RolloutResult


def task(i: int, family: str) -> SkyRLSample:
    return SkyRLSample("rules/test", [{"role": "user", "content": str(i)}],
                       {"method": "rule", "ground_truth": {"task_id": f"{family}-{i}"}}, {"template": family})


SIZES = {"solved": 6, "half": 5, "failed": 4, "tiny": 1}
TASKS = [task(i, f) for i, f in enumerate(f for f, n in SIZES.items() for _ in range(n))]


class ProbeRollouts:
    """Success by family: 'solved' always, 'failed' and 'tiny' never, 'half' on even task numbers."""

    def __init__(self) -> None:
        self.runs: list[tuple[list[str], int, float]] = []

    def sampling(self, temperature: float) -> dict:
        return {"temperature": temperature}

    def run(self, tasks, n, sampling, on_episode=None):
        self.runs.append(([t.task_id for t in tasks], n, sampling["temperature"]))
        records = []
        for t in tasks:
            family, number = t.task_id.rsplit("-", 1)
            records.append({"reward": 0.0, "success": family == "solved" or (family == "half" and int(number) % 2 == 0)})
            if on_episode:
                on_episode()
        return RolloutResult(list(tasks), [t.task_id for t in tasks], {}, records)


def prompts(tmp_path, probe: ProbeConfig, state: TrainState | None = None, seed: int = 0, tasks=TASKS):
    """GRPO's prompt stream as a fresh run (or `state`'s resumed one) builds it, and the probe episodes run."""
    rollouts = ProbeRollouts()
    cfg = TrainConfig(experimental=ExperimentalConfig(probe=probe))
    cfg.run.seed = seed
    cfg.logging.rollouts = False  # these records are not full trajectories
    state = state or TrainState(phase="grpo")
    run = SimpleNamespace(cfg=cfg, policy=SimpleNamespace(rollouts=rollouts), train_tasks=tasks, state=state, dir=tmp_path)
    stream = grpo_prompts(run, grpo_hooks(run))
    return stream, rollouts.runs, state


def pool(tmp_path, probe: ProbeConfig, state: TrainState | None = None, seed: int = 0, tasks=TASKS):
    """The tasks of the stream's first epoch (its first len(pool) prompts are the pool, shuffled)."""
    stream, runs, state = prompts(tmp_path, probe, state, seed, tasks)
    drawn = list(islice(stream, 2 * len(tasks)))
    first = drawn[:len({t.task_id for t in drawn})]
    assert sorted(t.task_id for t in first) == sorted({t.task_id for t in drawn})  # an epoch before any repeat
    return first, runs, state


def ids(tasks) -> list[str]:
    return [t.task_id for t in tasks]


def test_off_by_default_every_task_and_no_episodes(tmp_path):
    chosen, runs, state = pool(tmp_path, ProbeConfig())
    assert sorted(ids(chosen)) == sorted(ids(TASKS)) and runs == [] and state.probe is None


def test_grpo_draws_only_from_the_families_the_warm_start_fails(tmp_path):
    chosen, runs, state = pool(tmp_path, ProbeConfig(per_family=4))
    (probed, n, temperature), = runs
    assert n == 1 and temperature == 0.0  # one greedy episode per probed task
    assert Counter(i.rsplit("-", 1)[0] for i in probed) == {"solved": 4, "half": 4, "failed": 4, "tiny": 1}
    assert state.probe["solved"] == 1.0 and state.probe["failed"] == 0.0 and state.probe["tiny"] == 0.0
    assert 0 < state.probe["half"] < 1
    assert {t.family for t in chosen} == {"half", "failed", "tiny"}
    assert len(chosen) == SIZES["half"] + SIZES["failed"] + SIZES["tiny"]  # every task of a kept family, probed or not


def test_keep_below_sets_how_bad_a_family_must_be(tmp_path):
    chosen, _, _ = pool(tmp_path, ProbeConfig(per_family=4, keep_below=0.1))
    assert {t.family for t in chosen} == {"failed", "tiny"}


def test_a_warm_start_that_solves_everything_keeps_every_task(tmp_path):
    solved = [t for t in TASKS if t.family == "solved"]
    chosen, _, _ = pool(tmp_path, ProbeConfig(per_family=2), tasks=solved)
    assert sorted(ids(chosen)) == sorted(ids(solved))


def test_the_probed_tasks_follow_the_seed(tmp_path):
    first = pool(tmp_path, ProbeConfig(per_family=2), seed=1)[1][0][0]
    assert pool(tmp_path, ProbeConfig(per_family=2), seed=1)[1][0][0] == first
    assert any(pool(tmp_path, ProbeConfig(per_family=2), seed=s)[1][0][0] != first for s in range(2, 6))


def test_a_resumed_run_keeps_its_pool_without_probing_again(tmp_path):
    _, _, state = pool(tmp_path, ProbeConfig(per_family=4))
    state.grpo_step = 2  # as read back from a GRPO checkpoint
    chosen, runs, _ = pool(tmp_path, ProbeConfig(per_family=4), state=state)
    assert runs == [] and {t.family for t in chosen} == {"half", "failed", "tiny"}


@pytest.mark.parametrize(("share", "focus_positions"), [(1 / 3, {2, 5, 8, 11}), (0.5, {1, 3, 5, 7, 9, 11})])
def test_share_mixes_the_failed_families_into_every_task_at_fixed_positions(tmp_path, share, focus_positions):
    stream, _, state = prompts(tmp_path, ProbeConfig(per_family=4, share=share))
    drawn = list(islice(stream, 12))
    failed = [t for t in TASKS if t.family in {"half", "failed", "tiny"}]
    focus = [drawn[i] for i in sorted(focus_positions)]
    rest = [t for i, t in enumerate(drawn) if i not in focus_positions]
    assert ids(focus) == ids(islice(prompt_stream(failed, 0, "stratified"), len(focus)))
    assert ids(rest) == ids(islice(prompt_stream(TASKS, 0, "stratified"), len(rest)))
    assert any(t.family == "solved" for t in rest)  # the whole pool keeps the solved families in play

    state.grpo_step = 4  # resumed: the same probe, the same stream, nothing probed again
    resumed, runs, _ = prompts(tmp_path, ProbeConfig(per_family=4, share=share), state=state)
    assert runs == [] and ids(islice(resumed, 12)) == ids(drawn)
