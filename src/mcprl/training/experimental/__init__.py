"""The off-by-default knobs that measurement has kept out of the recipe so far (`experimental:`), each in its
own module; those that change the GRPO loop attach through its hooks (loop/hooks.py). negative_weight, credit
(training/credit.py) and grpo_detach change the update's numbers inside grpo.update."""

from __future__ import annotations

from mcprl.training.experimental.guard import GuardHook
from mcprl.training.experimental.guidance import GuidanceHook
from mcprl.training.experimental.probe import ProbeHook
from mcprl.training.loop.hooks import GRPOHook
from mcprl.training.run import Run


def grpo_hooks(run: Run) -> list[GRPOHook]:
    """The hooks of the knobs `experimental:` turns on, in the order the GRPO phase calls them."""
    knobs = run.cfg.experimental
    on = [(knobs.probe.per_family, ProbeHook), (knobs.expert_guidance, GuidanceHook), (knobs.guard.every, GuardHook)]
    return [hook(run) for enabled, hook in on if enabled]
