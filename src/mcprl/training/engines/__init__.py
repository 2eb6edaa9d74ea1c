"""Training engines by name (`mcprl train --engine NAME`): add a module implementing `TrainEngine` and
an entry here. Engines import their heavy parts (torch, Ray, SkyRL) only when they run."""

from __future__ import annotations

from collections.abc import Callable

from mcprl.errors import ConfigError, suggest
from mcprl.training.engines.base import RunRequest, TrainEngine
from mcprl.training.engines.embedded import EmbeddedEngine
from mcprl.training.engines.skyrl import SkyRLEngine
from mcprl.training.engines.tinker import TinkerEngine

ENGINES: dict[str, Callable[[], TrainEngine]] = {"embedded": EmbeddedEngine, "skyrl": SkyRLEngine,
                                                    "tinker": TinkerEngine}


def get_engine(name: str) -> TrainEngine:
    if name not in ENGINES:
        hint = suggest(name, ENGINES)
        raise ConfigError(f"unknown engine {name!r}; {hint + ' ' if hint else ''}available: {', '.join(ENGINES)}")
    return ENGINES[name]()


__all__ = ["ENGINES", "RunRequest", "TrainEngine", "get_engine"]
