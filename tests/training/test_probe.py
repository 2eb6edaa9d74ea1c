"""`algo.probe`: GRPO's prompts come from the task families the warm start fails on a greedy probe."""

from collections import Counter
from types import SimpleNamespace

from mcprl.data.sample import SkyRLSample
from mcprl.training.checkpoint import TrainState
from mcprl.training.config import AlgoConfig, ProbeConfig, TrainConfig
from mcprl.training.rollout import RolloutResult
from mcprl.training.trainer import grpo_pool, task_family


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


def pool(tmp_path, probe: ProbeConfig, state: TrainState | None = None, seed: int = 0):
    rollouts = ProbeRollouts()
    cfg = TrainConfig(algo=AlgoConfig(probe=probe))
    cfg.run.seed = seed
    cfg.logging.rollouts = False  # these records are not full trajectories
    state = state or TrainState(phase="grpo")
    chosen = grpo_pool(SimpleNamespace(rollouts=rollouts), cfg, TASKS, state, tmp_path)
    return chosen, rollouts.runs, state


def test_off_by_default_every_task_and_no_episodes(tmp_path):
    chosen, runs, state = pool(tmp_path, ProbeConfig())
    assert chosen == TASKS and runs == [] and state.probe is None


def test_grpo_draws_only_from_the_families_the_warm_start_fails(tmp_path):
    chosen, runs, state = pool(tmp_path, ProbeConfig(per_family=4))
    (ids, n, temperature), = runs
    assert n == 1 and temperature == 0.0  # one greedy episode per probed task
    assert Counter(i.rsplit("-", 1)[0] for i in ids) == {"solved": 4, "half": 4, "failed": 4, "tiny": 1}
    assert state.probe["solved"] == 1.0 and state.probe["failed"] == 0.0 and state.probe["tiny"] == 0.0
    assert 0 < state.probe["half"] < 1
    assert {task_family(t) for t in chosen} == {"half", "failed", "tiny"}
    assert len(chosen) == SIZES["half"] + SIZES["failed"] + SIZES["tiny"]  # every task of a kept family, probed or not


def test_keep_below_sets_how_bad_a_family_must_be(tmp_path):
    chosen, _, _ = pool(tmp_path, ProbeConfig(per_family=4, keep_below=0.1))
    assert {task_family(t) for t in chosen} == {"failed", "tiny"}


def test_a_warm_start_that_solves_everything_keeps_every_task(tmp_path):
    solved = [t for t in TASKS if task_family(t) == "solved"]
    cfg = TrainConfig(algo=AlgoConfig(probe=ProbeConfig(per_family=2)))
    cfg.logging.rollouts = False
    chosen = grpo_pool(SimpleNamespace(rollouts=ProbeRollouts()), cfg, solved, TrainState(phase="grpo"), tmp_path)
    assert chosen == solved


def test_the_probed_tasks_follow_the_seed(tmp_path):
    first = pool(tmp_path, ProbeConfig(per_family=2), seed=1)[1][0][0]
    assert pool(tmp_path, ProbeConfig(per_family=2), seed=1)[1][0][0] == first
    assert any(pool(tmp_path, ProbeConfig(per_family=2), seed=s)[1][0][0] != first for s in range(2, 6))


def test_a_resumed_run_keeps_its_pool_without_probing_again(tmp_path):
    _, _, state = pool(tmp_path, ProbeConfig(per_family=4))
    state.grpo_step = 2  # as read back from a GRPO checkpoint
    chosen, runs, _ = pool(tmp_path, ProbeConfig(per_family=4), state=state)
    assert runs == [] and {task_family(t) for t in chosen} == {"half", "failed", "tiny"}
