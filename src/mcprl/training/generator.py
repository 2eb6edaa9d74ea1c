"""SkyRL's own multi-turn generator (`SkyRLGymGenerator`) over mcprl's inference engine and env: the one
place rollouts and evals are built, in the embedded trainer and under SkyRL's trainer alike."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from transformers import PreTrainedTokenizerBase

from mcprl._skyrl import GeneratorConfig, SkyRLGymGenerator, get_vllm_sampling_params
from mcprl._skyrl import SamplingParams as SkyRLSamplingParams
from mcprl.inference.engine import BatchingEngine, SamplingParams, UnsupportedSampling
from mcprl.training.skyrl_gym_config import MCPSkyRLGymConfig


class MCPGenerator(SkyRLGymGenerator):
    """SkyRL's generator, unchanged, plus a call per finished episode (a progress bar) through SkyRL's
    own post-process hook, which every episode's `agent_loop` passes on its way out."""

    def __init__(self, *args: Any, on_episode: Callable[[], None] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_episode = on_episode

    def _post_process_agent_loop_output(self, agent_loop_output: Any, env_extras: dict[str, Any],
                                        trajectory_id: Any) -> Any:
        output = super()._post_process_agent_loop_output(agent_loop_output, env_extras, trajectory_id)
        if self.on_episode is not None:
            self.on_episode()
        return output


def make_generator(
    engine: BatchingEngine,
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_turns: int,
    max_input_length: int,
    sampling: Mapping[str, Any],
    max_env_workers: int = 4,
    env_config: Mapping[str, Any] | None = None,
    openenv_config: Mapping[str, Any] | None = None,
    on_episode: Callable[[], None] | None = None,
    **generator_options: Any,
) -> MCPGenerator:
    """A real `SkyRLGymGenerator` over `engine`. `sampling` uses SkyRL's `generator.sampling_params`
    keys (max_generate_length, temperature, top_p, top_k, min_p, logprobs, stop); the engine's
    defaults are set from the same values through SkyRL's own vLLM conversion, so a `GeneratorInput`
    with `sampling_params=None` and one with the trainer's converted params generate alike.
    `env_config` reaches every `mcp_tool_env` (EnvConfig fields), `openenv_config` every `openenv_env`
    (OpenEnvConfig fields); `on_episode` is called as each episode
    ends; `generator_options` are further `GeneratorConfig` fields (e.g. `zero_reward_on_non_stop`)."""
    try:
        sampling_cfg = SkyRLSamplingParams(**sampling)
    except TypeError as exc:
        keys = ", ".join(f.name for f in fields(SkyRLSamplingParams))
        raise UnsupportedSampling(f"bad sampling {dict(sampling)!r} ({exc}); SkyRL keys are: {keys}") from exc
    engine.default_sampling = SamplingParams.from_dict(get_vllm_sampling_params(sampling_cfg))
    generator_cfg = GeneratorConfig(
        max_turns=max_turns,
        max_input_length=max_input_length,
        sampling_params=sampling_cfg,
        batched=False,
        **generator_options,
    )
    return MCPGenerator(
        generator_cfg=generator_cfg,
        skyrl_gym_cfg=MCPSkyRLGymConfig(max_env_workers=max_env_workers, mcp_tool_env=dict(env_config or {}),
                                        openenv_env=dict(openenv_config or {})),
        inference_engine_client=engine,
        tokenizer=tokenizer,
        on_episode=on_episode,
    )
