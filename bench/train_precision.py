"""Training-step throughput by intra-op threads and precision, side by side in one run.

One LoRA (r=16, all linear layers) step on SmolLM2-135M: forward, LM head at 100 positions per row,
backward, AdamW; 4 rows x 640 tokens. Each variant runs in its own process (threads are per process).

    .venv/bin/python bench/train_precision.py
"""

from __future__ import annotations

import argparse
import json
import time

from side_by_side import print_table, run_variant

VARIANTS = [(1, "fp32"), (1, "bf16"), (2, "fp32"), (2, "bf16")]


def one(threads: int, precision: str, steps: int = 3) -> float:
    import torch

    from mcprl.training.config import FinetuneConfig
    from mcprl.training.logprobs import selected_token_logprobs
    from mcprl.models.loading import load_model
    from mcprl.training.policy import wrap_for_finetune

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, _ = load_model("smollm2-135m", dtype="float32", device="cpu")
    model = wrap_for_finetune(model, FinetuneConfig())
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    rows, width = 4, 640
    ids = torch.randint(100, 40000, (rows, width))
    attention = torch.ones(rows, width, dtype=torch.long)
    select = torch.zeros(rows, width, dtype=torch.bool)
    select[:, 320:420] = True
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        stats = selected_token_logprobs(model, ids, attention, select, bf16=precision == "bf16")
        (-stats.logprobs.mean()).backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    return rows * width / min(times[1:])  # the first step pays one-time kernel set-up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=2, metavar=("THREADS", "PRECISION"))
    args = parser.parse_args()
    if args.one:
        print(json.dumps({"tok_s": one(int(args.one[0]), args.one[1])}))
        return
    results = {(threads, precision): run_variant(__file__, ["--one", str(threads), precision])["tok_s"]
               for threads, precision in VARIANTS}
    base = results[(1, "fp32")]
    print_table("LoRA training step throughput (4 x 640 tokens)", ("threads", "precision", "tok/s", "vs 1 thread fp32"),
                [(str(threads), precision, f"{rate:.0f}", f"{rate / base:.2f}x")
                 for (threads, precision), rate in results.items()])
    best = max(results, key=results.get)
    print(f"result: best={best[0]}threads_{best[1]} speedup_vs_1thread_fp32={results[best] / base:.2f}")


if __name__ == "__main__":
    main()
