"""`experimental.guard`: greedy probes between GRPO steps; the best probe's checkpoint is kept and comes back on a fall."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mcprl.training.checkpoint import TrainState, latest_checkpoint, read_state, save_checkpoint
from mcprl.training.config import ExperimentalConfig, GuardConfig, TrainConfig
from mcprl.training.experimental.guard import Guard, build_guard

from .test_probe import TASKS, ProbeRollouts
from .tiny_model import tiny_llama


def params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in model.parameters()])


class Run:
    """A GRPO run reduced to what the guard touches: a tiny model whose weights each step moves, AdamW, and
    checkpoints saved by the real save_checkpoint."""

    def __init__(self, tmp_path, scores: list[float], config: GuardConfig, state: TrainState | None = None):
        self.model, self.run_dir = tiny_llama(), tmp_path / "run"
        self.tokenizer = SimpleNamespace(save_pretrained=lambda path: None)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.state = state or TrainState(phase="grpo")
        self.scores, self.probed = list(scores), []
        self.guard = Guard(config, self.state, self.probe, self.run_dir)

    def probe(self, step: int) -> float:
        self.probed.append(step)
        return self.scores.pop(0)

    def save(self):
        return save_checkpoint(self.run_dir, self.state, self.model, self.tokenizer, self.opt, None, {})

    def step(self) -> None:
        self.opt.zero_grad()
        self.model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
        self.opt.step()
        self.state.grpo_step += 1

    def train(self, steps: int) -> dict[int, tuple[str, torch.Tensor]]:
        """Run to `steps`; per probed step: the guard's action and the weights after it."""
        self.guard.begin(None, self.save)
        seen = {self.state.grpo_step: ("best", params(self.model))}
        while self.state.grpo_step < steps:
            self.step()
            if self.guard.due(self.state.grpo_step, steps):
                action = self.guard.check(self.state.grpo_step, steps, self.model, self.opt)
                if action == "best":
                    self.save()
                seen[self.state.grpo_step] = (action, params(self.model))
        return seen


def test_a_fall_brings_back_the_best_weights_and_optimizer(tmp_path):
    run = Run(tmp_path, [0.5, 0.6, 0.4, 0.7], GuardConfig(every=2))
    seen = run.train(6)
    assert run.probed == [0, 2, 4, 6]
    assert [seen[s][0] for s in (2, 4, 6)] == ["best", "restored", "best"]
    assert torch.equal(seen[4][1], seen[2][1])  # step 4 fell below step 2: step 2's weights are back
    assert not torch.equal(seen[6][1], seen[2][1])  # and training went on from them
    record = run.state.guard
    assert record["best"] == 0.7 and record["best_step"] == 6
    assert record["probes"] == [[0, 0.5, "best"], [2, 0.6, "best"], [4, 0.4, "restored"], [6, 0.7, "best"]]
    assert json.loads(json.dumps(record)) == record  # lives in trainer_state.json


def test_the_optimizer_comes_back_with_the_weights(tmp_path):
    run = Run(tmp_path, [0.5, 0.6, 0.4], GuardConfig(every=1))
    run.train(1)
    moments = {k: v.clone() for k, v in run.opt.state[next(iter(run.model.parameters()))].items()}
    run.step()
    run.guard.check(2, 2, run.model, run.opt)
    restored = run.opt.state[next(iter(run.model.parameters()))]
    assert all(torch.equal(restored[k], moments[k]) for k in moments)


def test_a_fall_to_the_warm_start_empties_the_optimizer(tmp_path):
    run = Run(tmp_path, [0.5, 0.25], GuardConfig(every=1))
    warm = run.train(0)[0][1]
    run.step()
    assert run.opt.state
    assert run.guard.check(1, 1, run.model, run.opt) == "restored"
    assert torch.equal(params(run.model), warm) and not run.opt.state  # the warm start had no optimizer state


def test_tolerance_lets_a_small_fall_go_on_except_at_the_last_step(tmp_path):
    run = Run(tmp_path, [0.5, 0.45, 0.45, 0.45], GuardConfig(every=1, tolerance=0.1))
    seen = run.train(3)
    assert [seen[s][0] for s in (1, 2, 3)] == ["kept", "kept", "restored"]
    assert torch.equal(seen[3][1], seen[0][1])  # the run ends on the best probe's weights


def test_the_last_step_is_probed_even_off_the_interval(tmp_path):
    run = Run(tmp_path, [0.5, 0.5, 0.5], GuardConfig(every=2))
    run.train(3)
    assert run.probed == [0, 2, 3]  # a tie is a new best: the newer weights


def test_the_best_checkpoint_survives_pruning_and_a_resume_keeps_the_record(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative run dir, as `runs/NAME` is: the record holds an absolute path
    run = Run(Path("."), [0.5, 0.9, 0.1, 0.2, 0.3], GuardConfig(every=1))
    run.train(4)
    best = run.state.guard["checkpoint"]
    assert best.endswith("step_grpo_1")
    for _ in range(3):  # three more checkpoints with the default keep=2 prune everything else
        run.step()
        run.save()
    names = sorted(p.name for p in (run.run_dir / "checkpoints").glob("step_*"))
    assert names == ["step_grpo_0", "step_grpo_1", "step_grpo_6", "step_grpo_7"]
    resumed = read_state(latest_checkpoint(run.run_dir))
    again = Run(Path("."), [], GuardConfig(every=1), state=resumed)
    again.guard.begin(None, again.save)  # no new probe, no new warm-start checkpoint
    assert again.probed == [] and resumed.guard["checkpoint"] == best


def test_a_run_that_starts_from_a_checkpoint_takes_it_as_the_first_best(tmp_path):
    warm = Run(tmp_path / "sft", [], GuardConfig()).save()
    run = Run(tmp_path, [0.5], GuardConfig(every=1))
    run.guard.begin(warm, run.save)
    assert run.state.guard["checkpoint"] == str(warm.resolve())
    assert not (run.run_dir / "checkpoints").exists()  # nothing saved twice


def test_the_trainer_probes_the_same_seeded_tasks_greedily_every_time(tmp_path):
    rollouts = ProbeRollouts()
    cfg = TrainConfig(experimental=ExperimentalConfig(guard=GuardConfig(every=1, per_family=2)))
    cfg.logging.rollouts = False
    guard = build_guard(SimpleNamespace(rollouts=rollouts), cfg, TASKS, TrainState(phase="grpo"), tmp_path)
    first, second = guard.probe(0), guard.probe(2)
    (tasks, n, temperature), again = rollouts.runs
    assert again == (tasks, n, temperature) and n == 1 and temperature == 0.0
    assert sorted(t.rsplit("-", 1)[0] for t in tasks) == ["failed"] * 2 + ["half"] * 2 + ["solved"] * 2 + ["tiny"]
    assert first == second == pytest.approx(sum(t.startswith(("solved", "half")) and
                                                 (t.startswith("solved") or int(t.rsplit("-", 1)[1]) % 2 == 0)
                                                 for t in tasks) / 7)
    other = TrainConfig(experimental=ExperimentalConfig(guard=GuardConfig(every=1, per_family=2)))
    other.run.seed, other.logging.rollouts = 1, False
    build_guard(SimpleNamespace(rollouts=rollouts), other, TASKS, TrainState(phase="grpo"), tmp_path).probe(0)
    assert rollouts.runs[-1][0] != tasks  # another seed, other tasks
