"""A randomly initialised checkpoint directory with a real model's shape, for throughput runs where the
real weights cannot travel (a GPU machine with no model hub): the architecture's config, the default
model's tokenizer and chat template, weights from the config's own init, saved in bf16.

    python bench/random_model.py --out /tmp/qwen2.5-0.5b-random [--arch qwen2.5-0.5b|smollm2-135m|tiny-llama]
                                 [--dtype bfloat16|float32] [--tokenizer DIR]

Such a model samples near-uniform tokens, so its turns run to `max_new_tokens` and its tool calls are
malformed: tokens/s and step time are the heaviest case, success rates mean nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Qwen2Config

# Each model's config.json, except the vocabulary (the tokenizer's). smollm2-135m is the default model's
# shape, for the GPU tests where its GGUF (98 MB) cannot travel.
ARCHS = {
    "qwen2.5-0.5b": (Qwen2Config, dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                                       num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                                       rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)),
    "smollm2-135m": (LlamaConfig, dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                       num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                                       rope_theta=100_000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)),
    # two layers of width 64 with the default tokenizer: the Tinker engine's end-to-end test and `--quick` bench
    "tiny-llama": (LlamaConfig, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True)),
}


def build(arch: str, tokenizer_dir: Path, out: Path, seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> int:
    """Write the checkpoint to `out`; returns its parameter count."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    config_class, shape = ARCHS[arch]
    config = config_class(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                          eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **shape)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--arch", choices=sorted(ARCHS), default="qwen2.5-0.5b")
    parser.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    parser.add_argument("--tokenizer", type=Path, help="a checkpoint directory with the tokenizer "
                        "(default: the converted SmolLM2-135M-Instruct)")
    args = parser.parse_args()
    if args.tokenizer is None:
        from mcprl.models.loading import ensure_default_model

        args.tokenizer = ensure_default_model()
    params = build(args.arch, args.tokenizer, args.out, dtype=getattr(torch, args.dtype))
    print(f"{args.arch} ({params / 1e6:.0f}M parameters, random weights) written to {args.out}")


if __name__ == "__main__":
    main()
