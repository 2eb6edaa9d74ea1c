"""mcprl: train LLM agents with RL to use tools served over MCP, on SkyRL."""

import os

# Read by torch at its first CPU allocation: tensors over 2 MB then sit on transparent huge pages. Each
# training step allocates ~0.5 GB of fresh activations, logits and gradients, and faulting them in 4 kB
# pages was ~10% of an SFT step on a 2-core VM; same numbers bit for bit (docs/model.md). An explicit
# THP_MEM_ALLOC_ENABLE=0 in the environment wins.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__version__ = "0.1.0"
