"""One SFT step of the quickstart's full fine-tune, side by side: prompt with or without gradient,
heap trimmed after every step or only past the headroom.

The same 8 batches of the rule generator's expert demos (4 demos, micro-batches of 2, bf16 autocast
where the CPU has it, 2 threads) go through each variant in its own process, each with the trainer's
step: forward/backward, grad clip, fused AdamW.

    .venv/bin/python bench/sft_step.py
"""

from __future__ import annotations

import argparse
import json
import time

from side_by_side import print_table, run_variant

VARIANTS = [("full prompt, trim every step", False, 0.0), ("full prompt, trim past 1.5 GB", False, 1.5),
            ("detached prompt, trim past 1.5 GB", True, 1.5)]
STEPS = 8


def one(detach: bool, headroom: float) -> dict[str, float]:
    import random

    import torch

    from mcprl.data.rules import generate
    from mcprl.training.devices import pick_dtype, release_memory, rss_gb
    from mcprl.training.model import load_model
    from mcprl.training.sft import batches, sft_step, tokenize_conversation

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model, tokenizer = load_model("smollm2-135m", dtype="float32", device="cpu")
    model.train()
    bf16 = pick_dtype("cpu") == torch.bfloat16
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    demos = [tokenize_conversation(e["messages"], tokenizer, 1024) for e in generate(300, 1, progress=False).experts]
    stream = batches(demos, 4, random.Random("0:sft"))
    chosen = [next(stream) for _ in range(STEPS)]
    seconds, losses = 0.0, []
    for batch in chosen:
        t0 = time.perf_counter()
        losses.append(sft_step(model, batch, tokenizer.pad_token_id, micro_batch_size=2, bf16=bf16,
                               detach_prompt=detach)["sft_loss"])
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        release_memory(headroom_gb=headroom)
        seconds += time.perf_counter() - t0
    return {"s_per_step": seconds / STEPS, "loss": sum(losses) / STEPS, "rss_gb": rss_gb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=2, metavar=("DETACH", "HEADROOM"))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0] == "1", float(args.one[1]))))
        return
    results = {name: run_variant(__file__, ["--one", "1" if detach else "0", str(headroom)])
               for name, detach, headroom in VARIANTS}
    base = results[VARIANTS[0][0]]["s_per_step"]
    print_table(f"SFT step, full fine-tune, 4 demos x {STEPS} batches",
                ("variant", "s/step", "vs trim every step", "mean loss", "RSS GB"),
                [(name, f"{r['s_per_step']:.2f}", f"{base / r['s_per_step']:.2f}x", f"{r['loss']:.4f}",
                  f"{r['rss_gb']:.1f}") for name, r in results.items()])
    best = results[VARIANTS[-1][0]]["s_per_step"]
    print(f"result: sft_step_speedup={base / best:.2f}")


if __name__ == "__main__":
    main()
