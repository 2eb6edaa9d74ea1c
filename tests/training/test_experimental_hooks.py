"""The experimental knobs reach GRPO only as hooks, built in one place: one per knob turned on, none by default."""

from types import SimpleNamespace

from mcprl.training.checkpoint import TrainState
from mcprl.training.config import ExperimentalConfig, GuardConfig, ProbeConfig, TrainConfig
from mcprl.training.experimental import grpo_hooks
from mcprl.training.experimental.guard import GuardHook
from mcprl.training.experimental.guidance import GuidanceHook
from mcprl.training.experimental.probe import ProbeHook

from .test_probe import TASKS, ProbeRollouts


def test_each_knob_turned_on_attaches_its_hook_and_none_is_on_by_default(tmp_path):
    def run(experimental: ExperimentalConfig) -> SimpleNamespace:
        return SimpleNamespace(cfg=TrainConfig(experimental=experimental), policy=SimpleNamespace(rollouts=ProbeRollouts()),
                               train_tasks=TASKS, state=TrainState(phase="grpo"), dir=tmp_path)

    assert grpo_hooks(run(ExperimentalConfig())) == []
    every = ExperimentalConfig(probe=ProbeConfig(per_family=1), guard=GuardConfig(every=1), expert_guidance=True)
    assert [type(hook) for hook in grpo_hooks(run(every))] == [ProbeHook, GuidanceHook, GuardHook]
