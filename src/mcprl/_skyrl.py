"""The one module that imports SkyRL (0.3.0), so its version's quirks live in one place.

First the Python 3.11 shim: pydantic rejects `typing.TypedDict` there (skyrl/tinker/types.py), so it
becomes `typing_extensions.TypedDict` before any SkyRL import (a no-op on 3.12+). Then every SkyRL name
mcprl uses; the ones that pull in Ray or vLLM glue are imported when called. `skyrl_gym`, the env
interface, is imported by `mcprl.envs` directly.
"""

import sys
import typing
from typing import Any

if sys.version_info < (3, 12):
    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]

from skyrl.backends.skyrl_train.inference_servers.engine_utils import get_vllm_sampling_params  # noqa: E402
from skyrl.backends.skyrl_train.utils.ppo_utils import (  # noqa: E402
    AdvantageEstimatorRegistry,
    PolicyLossRegistry,
    apply_loss_reduction_to_advantages_minibatch,
    compute_advantages_and_returns,
    compute_approx_kl,
    ppo_critic_loss,
)
from skyrl.train.config import AlgorithmConfig, GeneratorConfig, SamplingParams  # noqa: E402
from skyrl.train.config.config import EnvironmentConfig, SkyRLGymConfig, SkyRLTrainConfig  # noqa: E402
from skyrl.train.generators.base import TrajectoryID  # noqa: E402
from skyrl.train.generators.skyrl_gym_generator import SkyRLGymGenerator  # noqa: E402
from skyrl.train.utils.callbacks import CallbackInput, TrainingCallback, TrainingControl  # noqa: E402
from skyrl.train.utils.trainer_utils import handle_dynamic_sampling  # noqa: E402

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
