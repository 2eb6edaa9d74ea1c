"""One PPO update (GAE and a critic) against one GRPO update on the same batches, side by side: seconds per
update and peak memory. The batches are bench/grpo_update.py's (3 groups of 4 multi-turn quickstart rows,
behaviour logprobs the model's own), the policy the quickstart's full fine-tune of SmolLM2-135M; the critic
is the `critic` section's default (a LoRA r=16 backbone of the same model plus a value head) or a full one.
Each variant runs in its own process; peak memory is that process's maximum RSS (model, critic, optimizer
states and activations).

    .venv/bin/python bench/ppo_step.py [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

from side_by_side import print_table, run_variant

VARIANTS = {"GRPO (advantage grpo, no critic)": "grpo", "PPO: GAE + LoRA critic (critic default)": "lora",
            "PPO: GAE + full critic": "full"}


def one(variant: str, steps: int) -> dict[str, float]:
    import torch

    from grpo_update import quickstart_batches
    from mcprl.models.devices import pick_dtype
    from mcprl.models.loading import load_model
    from mcprl.training import grpo
    from mcprl.training.config import TrainConfig
    from mcprl.training.critic import build_critic

    torch.set_num_threads(2)
    model, tokenizer = load_model("smollm2-135m", dtype="float32", device="cpu")
    model.train()
    bf16 = pick_dtype("cpu") == torch.bfloat16
    cfg = TrainConfig()
    if variant != "grpo":
        cfg.algo.advantage_estimator, cfg.algo.lambd, cfg.critic.mode = "gae", 0.95, variant
    critic = build_critic(cfg) if variant != "grpo" else None
    algo = cfg.algo
    config = grpo.skyrl_algorithm_config(algo, 1.0)
    opt = torch.optim.AdamW(model.parameters(), lr=algo.lr, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    seconds, loss = 0.0, []
    for batch in quickstart_batches(model, tokenizer, steps + 1, bf16):
        t0 = time.perf_counter()
        metrics = grpo.update(model, batch, config, algo, opt, sched, pad_id=tokenizer.pad_token_id,
                              temperature=1.0, bf16=bf16, critic=critic)
        if loss or steps == 0:
            seconds += time.perf_counter() - t0
        loss.append(metrics.get("critic_value_loss", float("nan")))  # the first update warms up, untimed
    return {"s_per_update": seconds / steps, "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "value_loss_first": loss[0], "value_loss_last": loss[-1], "bf16": float(bf16)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--one", choices=list(VARIANTS.values()))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.steps)))
        return
    results = {name: run_variant(__file__, ["--one", v, "--steps", str(args.steps)]) for name, v in VARIANTS.items()}
    base = results[next(iter(VARIANTS))]
    precision = "bf16 autocast" if base["bf16"] else "fp32"
    print_table(f"one update, full fine-tune policy, 3x4 multi-turn rows, {precision}",
                ("variant", "s/update", "vs GRPO", "peak GB", "vs GRPO", "value loss 1st -> last"),
                [(name, f"{r['s_per_update']:.2f}", f"{r['s_per_update'] / base['s_per_update']:.2f}x",
                  f"{r['peak_gb']:.2f}", f"{r['peak_gb'] / base['peak_gb']:.2f}x",
                  "-" if name == next(iter(VARIANTS)) else f"{r['value_loss_first']:.3f} -> {r['value_loss_last']:.3f}")
                 for name, r in results.items()])
    lora = results[list(VARIANTS)[1]]
    print(f"result: ppo_lora_vs_grpo_time={lora['s_per_update'] / base['s_per_update']:.2f} "
          f"memory={lora['peak_gb'] / base['peak_gb']:.2f}")


if __name__ == "__main__":
    main()
