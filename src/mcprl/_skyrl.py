"""The one module that imports SkyRL (0.3.0), so its version's quirks live in one place.

First the Python 3.11 shim: pydantic rejects `typing.TypedDict` there (skyrl/tinker/types.py), so it
becomes `typing_extensions.TypedDict` before any SkyRL import (a no-op on 3.12+). Then every SkyRL name
mcprl uses, each imported on first use; the ones that pull in Ray, vLLM glue or JAX behind functions.
`skyrl_gym`, the env interface, is imported by `mcprl.envs` directly.
"""

import sys
import typing
from typing import Any

if sys.version_info < (3, 12):
    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]

import importlib  # noqa: E402

# Each SkyRL name mcprl uses and the module it comes from, imported on first use (PEP 562): loading a config
# checks the registries' names without importing the trainer utilities, transformers among them (10 s of
# an 18 s config load on the 2-core machine).
_SOURCES = {
    "get_vllm_sampling_params": "skyrl.backends.skyrl_train.inference_servers.engine_utils",
    **dict.fromkeys(["AdvantageEstimatorRegistry", "PolicyLossRegistry", "apply_loss_reduction_to_advantages_minibatch",
                     "compute_advantages_and_returns", "compute_approx_kl", "ppo_critic_loss"],
                    "skyrl.backends.skyrl_train.utils.ppo_utils"),
    **dict.fromkeys(["AlgorithmConfig", "GeneratorConfig", "SamplingParams"], "skyrl.train.config"),
    **dict.fromkeys(["EnvironmentConfig", "SkyRLGymConfig", "SkyRLTrainConfig"], "skyrl.train.config.config"),
    "TrajectoryID": "skyrl.train.generators.base",
    "SkyRLGymGenerator": "skyrl.train.generators.skyrl_gym_generator",
    **dict.fromkeys(["CallbackInput", "TrainingCallback", "TrainingControl"], "skyrl.train.utils.callbacks"),
    "handle_dynamic_sampling": "skyrl.train.utils.trainer_utils",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_SOURCES[name]), name)
    globals()[name] = value  # later lookups skip this hook
    return value


__all__ = [
    "AdvantageEstimatorRegistry", "AlgorithmConfig", "CallbackInput", "EnvironmentConfig", "GeneratorConfig",
    "PolicyLossRegistry", "SamplingParams", "SkyRLGymConfig", "SkyRLGymGenerator", "SkyRLTrainConfig",
    "TrainingCallback", "TrainingControl", "TrajectoryID", "apply_loss_reduction_to_advantages_minibatch",
    "base_ppo_exp", "compute_advantages_and_returns", "compute_approx_kl", "get_vllm_sampling_params",
    "handle_dynamic_sampling", "initialize_ray", "ppo_critic_loss", "tinker_server", "validate_cfg",
]  # fmt: skip


def validate_cfg(cfg: Any) -> None:
    """SkyRL's own check of a trainer config (batch divisibility, placement, registries)."""
    from skyrl.train.utils import validate_cfg as check

    check(cfg)


def base_ppo_exp() -> type:
    """SkyRL's `BasePPOExp` (imported on demand: it pulls in the vLLM glue)."""
    from skyrl.train.entrypoints.main_base import BasePPOExp

    return BasePPOExp


def initialize_ray(cfg: Any) -> None:
    from skyrl.train.utils.utils import initialize_ray as start

    start(cfg)


def tinker_server() -> tuple[Any, Any]:
    """SkyRL's Tinker API module and its config module (imported on demand: they pull in JAX)."""
    import skyrl.tinker.api as api
    from skyrl.tinker import config

    return api, config
