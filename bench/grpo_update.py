"""One GRPO update of the quickstart's full fine-tune, side by side: what the backward pass skips
(`experimental.grpo_detach`, as `sft.detach`: nothing, the prompt, or the prompt and the tool results).

The batch has the shape of a quickstart step: 3 groups of 4 multi-turn trajectories (system prompt and
task, then assistant calls, tool results and the answer; only the assistant tokens trained). The
trajectories are the rule generator's expert demos, so the bench needs no warm-start checkpoint: a
group's four rows share a demo's prompt and keep 100/85/70/55% of its response (rollouts that stop at
different points), with rewards 1, 0, 1, 0, so every row carries a gradient, as under filter sampling. Behaviour
logprobs are the current model's, as on-policy rollouts give. Each variant runs in its own process on
the same batches: `selected_token_logprobs`'s forward/backward in micro-batches of 2, grad clip, fused
AdamW, bf16 autocast where the CPU has it, 2 threads.

    .venv/bin/python bench/grpo_update.py [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import time

from side_by_side import print_table, run_variant

VARIANTS = {"exact gradient (detach: none)": "none", "prompt without gradient (detach: prompt)": "prompt",
            "prompt and tool results without gradient (detach: context)": "context"}
GROUPS, GROUP_SIZE = 3, 4
KEEP = [1.0, 0.85, 0.7, 0.55]  # share of the demo's response each rollout of a group keeps


def quickstart_batches(model, tokenizer, steps: int, bf16: bool):
    """`steps` batches of the shape above, behaviour logprobs the model's own (bench/ppo_step.py uses them too)."""
    import random

    import torch

    from mcprl.data.rules import generate
    from mcprl.training import grpo
    from mcprl.training.logprobs import selected_token_logprobs
    from mcprl.training.sft import tokenize_conversation

    demos = [tokenize_conversation(e["messages"], tokenizer, 1024) for e in generate(300, 1, progress=False).experts]
    rng = random.Random(0)
    for _ in range(steps):
        rows = [d for d in rng.sample(demos, GROUPS) for _ in range(GROUP_SIZE)]
        firsts = [d.loss_mask.index(True) for d in rows]
        # a group's rollouts share the prompt and differ in length (identical rows would cancel to no gradient)
        ends = [f + round((len(d.input_ids) - f) * KEEP[i % GROUP_SIZE])
                for i, (d, f) in enumerate(zip(rows, firsts))]
        batch = grpo.build_batch({
            "prompt_token_ids": [d.input_ids[:f] for d, f in zip(rows, firsts)],
            "response_ids": [d.input_ids[f:e] for d, f, e in zip(rows, firsts, ends)],
            "loss_masks": [[int(m) for m in d.loss_mask[f:e]] for d, f, e in zip(rows, firsts, ends)],
            "rewards": [float(i % 2 == 0) for i in range(len(rows))],
            "rollout_logprobs": [[0.0] * (e - f) for f, e in zip(firsts, ends)],
        }, [f"g{i // GROUP_SIZE}" for i in range(len(rows))])
        ids, attention, select = grpo.token_tensors(batch, list(range(batch.size)), tokenizer.pad_token_id)
        with torch.no_grad():
            own = selected_token_logprobs(model, ids, attention, select, bf16=bf16).logprobs
        batch.old_logprobs = grpo.scatter_tokens(own, batch.loss_mask)
        yield batch


def one(detach: str, steps: int) -> dict[str, float]:
    import torch

    from mcprl.models.devices import pick_dtype
    from mcprl.models.loading import load_model
    from mcprl.training import grpo
    from mcprl.training.config import AlgoConfig, ExperimentalConfig

    torch.set_num_threads(2)
    model, tokenizer = load_model("smollm2-135m", dtype="float32", device="cpu")
    model.train()
    bf16 = pick_dtype("cpu") == torch.bfloat16
    algo = AlgoConfig()
    config = grpo.skyrl_algorithm_config(algo, 1.0)
    opt = torch.optim.AdamW(model.parameters(), lr=algo.lr, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    seconds, tokens, norms = 0.0, 0.0, []
    for batch in quickstart_batches(model, tokenizer, steps, bf16):
        t0 = time.perf_counter()
        metrics = grpo.update(model, batch, config, algo, opt, sched, pad_id=tokenizer.pad_token_id,
                              temperature=1.0, bf16=bf16, experimental=ExperimentalConfig(grpo_detach=detach))
        seconds += time.perf_counter() - t0
        tokens += sum(len(ids) for ids in batch.input_ids)
        norms.append(metrics["grad_norm"])
    return {"s_per_update": seconds / steps, "positions": tokens / steps, "grad_norm": norms[0],
            "bf16": float(bf16)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--one", choices=list(VARIANTS.values()))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.steps)))
        return
    results = {name: run_variant(__file__, ["--one", detach, "--steps", str(args.steps)])
               for name, detach in VARIANTS.items()}
    base, prompt, context = (results[name]["s_per_update"] for name in VARIANTS)
    precision = "bf16 autocast" if results[next(iter(VARIANTS))]["bf16"] else "fp32"
    print_table(f"GRPO update, full fine-tune, {GROUPS}x{GROUP_SIZE} multi-turn rows, {precision}",
                ("variant", "s/update", "speedup", "positions/update", "grad norm, step 1"),
                [(name, f"{r['s_per_update']:.2f}", f"{base / r['s_per_update']:.2f}x", f"{r['positions']:.0f}",
                  f"{r['grad_norm']:.4f}") for name, r in results.items()])
    print(f"result: grpo_update_speedup={base / prompt:.2f} context_speedup={base / context:.2f}")


if __name__ == "__main__":
    main()
