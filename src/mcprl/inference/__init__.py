"""Generation for rollouts: the in-process batching engine (KV prefix cache, continuous decode waves)
and the vLLM engine, both behind SkyRL's inference-engine interface. Imports models only: no training,
no skyrl."""
