"""One SFT step of the quickstart's full fine-tune, side by side: what the backward pass skips
(`sft.detach`: nothing, the prompt, or the prompt and the tool results), every layer trained or only
the top ones (`finetune.top_layers`), torch's large tensors on huge pages (mcprl's default) or on
4 kB pages (`THP_MEM_ALLOC_ENABLE=0`).

The same 8 batches of the rule generator's expert demos (4 demos, micro-batches of 2, bf16 autocast
where the CPU has it, 2 threads) go through each variant in its own process, each with the trainer's
step: forward/backward, grad clip, fused AdamW over the trained parameters, heap trim.

    .venv/bin/python bench/sft_step.py
"""

from __future__ import annotations

import argparse
import json
import os
import time

from side_by_side import print_table, run_variant

VARIANTS = [("prompt with gradient, every layer", "none", None, True),
            ("detached prompt, every layer", "prompt", None, True),
            ("detached prompt and tool results, every layer", "context", None, True),
            ("detached prompt, top 15 of 30 layers", "prompt", 15, True),
            ("detached prompt, top 10 of 30 layers", "prompt", 10, True),
            ("detached prompt, every layer, 4 kB pages", "prompt", None, False)]
STEPS = 8


def one(detach: str, top_layers: int | None) -> dict[str, float]:
    import random

    import torch

    from mcprl.data.rules import generate
    from mcprl.training.config import FinetuneConfig
    from mcprl.models.devices import pick_dtype, release_memory, rss_gb
    from mcprl.models.loading import load_model
    from mcprl.training.policy import wrap_for_finetune
    from mcprl.training.sft import batches, sft_step, tokenize_conversation

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model, tokenizer = load_model("smollm2-135m", dtype="float32", device="cpu")
    model = wrap_for_finetune(model, FinetuneConfig(mode="full", top_layers=top_layers))
    model.train()
    bf16 = pick_dtype("cpu") == torch.bfloat16
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=1e-4, fused=True)
    demos = [tokenize_conversation(e["messages"], tokenizer, 1024) for e in generate(300, 1, progress=False).experts]
    stream = batches(demos, 4, random.Random("0:sft"))
    chosen = [next(stream) for _ in range(STEPS)]
    seconds, losses = 0.0, []
    for batch in chosen:
        t0 = time.perf_counter()
        losses.append(sft_step(model, batch, tokenizer.pad_token_id, micro_batch_size=2, bf16=bf16,
                               detach=detach)["sft_loss"])
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        release_memory()
        seconds += time.perf_counter() - t0
    return {"s_per_step": seconds / STEPS, "loss": sum(losses) / STEPS, "rss_gb": rss_gb(), "bf16": float(bf16),
            "trained_m": sum(p.numel() for p in trained) / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=2, metavar=("DETACH", "TOP_LAYERS"))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], None if args.one[1] == "all" else int(args.one[1]))))
        return
    results = {name: run_variant(__file__, ["--one", detach, "all" if top is None else str(top)],
                                 env={**os.environ, "THP_MEM_ALLOC_ENABLE": "1" if huge else "0"})
               for name, detach, top, huge in VARIANTS}
    first, every, context, top15, small_pages = (results[VARIANTS[i][0]]["s_per_step"] for i in (0, 1, 2, 3, 5))
    precision = "bf16 autocast" if results[VARIANTS[0][0]]["bf16"] else "fp32"
    print_table(f"SFT step, full fine-tune, 4 demos x {STEPS} batches, {precision}",
                ("variant", "trained M params", "s/step", "vs prompt with gradient", "vs detached, every layer",
                 "mean loss", "RSS GB"),
                [(name, f"{r['trained_m']:.0f}", f"{r['s_per_step']:.2f}", f"{first / r['s_per_step']:.2f}x",
                  f"{every / r['s_per_step']:.2f}x", f"{r['loss']:.4f}", f"{r['rss_gb']:.1f}")
                 for name, r in results.items()], width=150)
    print(f"result: detach_speedup={first / every:.2f} context_speedup={every / context:.2f} "
          f"top15_speedup={every / top15:.2f} huge_pages_speedup={small_pages / every:.2f}")


if __name__ == "__main__":
    main()
