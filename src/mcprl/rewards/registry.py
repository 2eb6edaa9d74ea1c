"""Rewards by name: the env knows none of them, it asks here. A custom reward is a class in the user's own
module plus one config line (`reward.fn: mypkg.rewards:MyReward`, keyword arguments in `reward.options`);
a name in `REWARDS` works the same way."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from mcprl.errors import ConfigError, suggest
from mcprl.rewards.base import RewardFn, RewardSettings


def _heuristic(settings: RewardSettings) -> RewardFn:
    from mcprl.rewards.heuristic import HeuristicReward, HeuristicWeights

    return HeuristicReward(HeuristicWeights(**settings.weights))


def _judge(settings: RewardSettings) -> RewardFn:
    from mcprl.rewards.heuristic import HeuristicWeights
    from mcprl.rewards.judge import JudgeReward  # on demand: it pulls in an HTTP client

    return JudgeReward(settings.judge, HeuristicWeights(**settings.weights))


# name -> factory; add an entry to register a reward by name, or use a "module:Class" entry point.
REWARDS: dict[str, Callable[[RewardSettings], RewardFn]] = {"heuristic": _heuristic, "llm_judge": _judge}


def build_reward(settings: RewardSettings) -> RewardFn:
    """A registered reward by name, or `module:Class` called with `settings.options` as keyword arguments."""
    name = settings.fn
    if name in REWARDS:
        return REWARDS[name](settings)
    if ":" not in name:
        hint = suggest(name, REWARDS)
        raise ConfigError(f"reward.fn={name!r} is neither a registered reward ({', '.join(sorted(REWARDS))}) "
                          f"nor a 'module:Class' entry point{'; ' + hint if hint else ''}")
    module_name, _, attr = name.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"reward.fn={name!r}: cannot load it ({type(err).__name__}: {err})") from None
    try:
        reward = cls(**settings.options)
    except TypeError as err:
        raise ConfigError(f"reward.fn={name!r} does not take reward.options {settings.options!r}: {err}") from None
    missing = [m for m in ("reset", "step", "end") if not callable(getattr(reward, m, None))]
    if missing:
        raise ConfigError(f"reward.fn={name!r} is not a RewardFn: it has no {', '.join(missing)} method "
                          "(mcprl.rewards.base.RewardFn)")
    return reward
