"""A run's phases, which `trainer.train` calls in order: evals, SFT, GRPO (its prompt stream and hooks)."""
