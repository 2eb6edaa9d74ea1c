"""Environments. Importing this package registers `mcp_tool_env` with skyrl_gym."""

from skyrl_gym.envs.registration import register, registry

ENV_ID = "mcp_tool_env"

if ENV_ID not in registry:
    register(id=ENV_ID, entry_point="mcprl.envs.mcp_env:MCPToolEnv")

__all__ = ["ENV_ID"]
