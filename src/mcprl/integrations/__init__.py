"""mcprl in other people's stacks: its tasks served as OpenEnv environments, and a TRL shim over them."""
