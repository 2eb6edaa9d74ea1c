"""A seeded, randomly initialised Llama small enough for exact fp32 checks of training code."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(num_hidden_layers: int = 3, *, tied: bool = False, vocab_size: int = 64) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=num_hidden_layers, num_attention_heads=4,
                                        num_key_value_heads=2, tie_word_embeddings=tied))
