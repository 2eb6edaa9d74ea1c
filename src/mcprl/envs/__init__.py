"""Environments. Importing this package registers `mcp_tool_env` and `openenv_env` with skyrl_gym."""

from skyrl_gym.envs.registration import register, registry

ENV_ID = "mcp_tool_env"
OPENENV_ID = "openenv_env"
ENTRY_POINTS = {ENV_ID: "mcprl.envs.mcp_env:MCPToolEnv", OPENENV_ID: "mcprl.envs.openenv_env:OpenEnvEnv"}

for _id, _entry in ENTRY_POINTS.items():
    if _id not in registry:
        register(id=_id, entry_point=_entry)

__all__ = ["ENTRY_POINTS", "ENV_ID", "OPENENV_ID"]
