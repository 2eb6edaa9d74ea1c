"""mcprl's tasks as an OpenEnv environment server (`mcprl openenv serve`)."""
