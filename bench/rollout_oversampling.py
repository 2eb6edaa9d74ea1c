"""GRPO rollouts of the same prompts, side by side: two batches in a row (filter sampling's second draw)
or one batch of twice the prompts (`algo.dynamic_sampling.prompts_per_batch`, DAPO's over-sampling).

On a CPU a decode step reads every weight whatever the batch, so doubling the episodes that decode
together costs far less than twice the time. Each variant runs `bench/multiturn_rollout.py`'s
bucketed-prefill rollout (the trainer's path: SkyRL's generator, `mcp_tool_env`, the embedded engine,
2 threads) in its own process on the same prompts, from a warm-started checkpoint.

    .venv/bin/python bench/rollout_oversampling.py [--checkpoint runs/quickstart/checkpoints/step_grpo_0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from side_by_side import print_table, run_variant

SCRIPT = str(Path(__file__).with_name("multiturn_rollout.py"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=Path("runs/quickstart/checkpoints/step_grpo_0"))
    parser.add_argument("--prompts", type=int, default=3, help="algo.prompts_per_step")
    args = parser.parse_args()
    n = args.prompts
    variants = {f"2 batches of {n} prompts, in a row": (n, 2), f"1 batch of {2 * n} prompts": (2 * n, 1)}
    results = {name: run_variant(SCRIPT, ["--one", "bucketed", "--checkpoint", str(args.checkpoint),
                                          "--prompts", str(prompts), "--batches", str(batches)])
               for name, (prompts, batches) in variants.items()}
    base, over = results.values()
    print_table(f"GRPO rollouts of the same {2 * n} prompts x group 4, multi-turn",
                ("rollout batches", "episodes", "rollout s", "generated tokens", "gen tok/s", "groups with signal",
                 "speedup"),
                [(name, str(r["episodes"]), f"{r['wall_s']:.1f}", str(r["generated"]),
                  f"{r['generated'] / r['wall_s']:.1f}", str(r["informative"]), f"{base['wall_s'] / r['wall_s']:.2f}x")
                 for name, r in results.items()], width=140)
    print(f"result: oversampling_speedup={base['wall_s'] / over['wall_s']:.2f}")


if __name__ == "__main__":
    main()
