"""mcprl: train LLM agents with RL to use tools served over MCP, on SkyRL."""

__version__ = "0.1.0"
