"""SkyRL's env section with mcprl's envs in it: shared by the generator and the SkyRL launcher, whose
dry run must not import the generator (and with it transformers and the inference engine)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mcprl._skyrl import SkyRLGymConfig


@dataclass
class MCPSkyRLGymConfig(SkyRLGymConfig):
    """SkyRL hands `getattr(skyrl_gym, env_class)` to the env as env_config and rejects unknown
    fields, so our env gets a field of its own name (EnvConfig's keys, checked by EnvConfig)."""

    mcp_tool_env: dict = field(default_factory=dict)
    openenv_env: dict = field(default_factory=dict)
