"""Multi-turn GRPO rollouts on the real MCP servers, side by side: every row's new tokens prefilled in
one padded forward, or each distinct prompt once in buckets of similar length; a decode cache that
concatenates all keys/values at every step, or one with room for the tokens to come; and Linear weights
as stored, or column-major, which fp32 GEMMs at a decode step's few rows run 2-5x faster (the engine's way).

A turn's new tokens are the tool result, from a dozen tokens to several hundred, so one padded
forward computes far more positions than there are tokens; and a multi-turn context runs to a
thousand tokens, so copying the whole cache at each decode step costs as much as the matmuls. Each
variant runs in its own process on the same tasks, seed and weights (a warm-started checkpoint: the
base model calls no tools), with the trainer's rollout path: SkyRL's generator, `mcp_tool_env`, the
embedded engine in the machine's dtype (`auto`; the column-major layout applies in fp32 only), 2 threads.

    .venv/bin/python bench/multiturn_rollout.py [--checkpoint runs/quickstart/checkpoints/step_grpo_0]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from side_by_side import print_table, run_variant

# Each variant adds one of the engine's choices to the one above it.
VARIANTS = {
    "padded prefill, cache concatenated, weights [out, in]": "padded",
    "prefill by length": "bucketed",
    "+ decode cache with room": "room",
    "+ weights column-major (engine)": "engine",
}
BASE, ENGINE = next(iter(VARIANTS)), list(VARIANTS)[-1]


def one(variant: str, checkpoint: Path, prompts: int, batches: int) -> dict[str, float]:
    import mcprl.inference.engine as inference
    from mcprl.training.checkpoint import load_weights
    from mcprl.training.config import load_train_config
    from mcprl.training.ordering import prompt_stream
    from mcprl.training.policy import build_policy
    from mcprl.training.run import prepare_data

    timed = {"prefill_s": 0.0, "computed": 0}
    padded = inference._prefill_padded

    def counting(model, rows, pad_id):  # every prefill forward goes through here
        t0 = time.perf_counter()
        out = padded(model, rows, pad_id)
        timed["prefill_s"] += time.perf_counter() - t0
        timed["computed"] += len(rows) * max(r.new_tokens for r in rows)
        return out

    inference._prefill_padded = counting
    stage = list(VARIANTS.values()).index(variant)
    if stage < 1:
        inference._prefill = counting
    if stage < 2:
        inference._with_room = lambda cache, room: cache
    if stage < 3:
        inference._column_major = lambda model: None
    cfg = load_train_config(Path(__file__).parents[1] / "configs" / "quickstart.yaml")
    policy = build_policy(cfg)
    load_weights(checkpoint, policy.model)
    tasks, _, _ = prepare_data(cfg)
    stream = prompt_stream(tasks, cfg.run.seed, cfg.algo.prompt_order)
    sampling = policy.rollouts.sampling(cfg.rollout.temperature)
    wall, generated, episodes = 0.0, 0, 0
    for _ in range(batches):
        chosen = [next(stream) for _ in range(prompts)]
        t0 = time.perf_counter()
        result = policy.rollouts.run(chosen, cfg.algo.group_size, sampling)
        wall += time.perf_counter() - t0
        generated += sum(sum(mask) for mask in result.output["loss_masks"])
        episodes += len(result.trajectories)
    policy.engine.close()
    return {"wall_s": wall, "episodes": episodes, "generated": generated, **timed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=Path("runs/quickstart/checkpoints/step_grpo_0"))
    parser.add_argument("--prompts", type=int, default=3, help="prompts per rollout batch (x group_size episodes)")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--one", choices=sorted(VARIANTS.values()))
    args = parser.parse_args()
    if not (args.checkpoint / "training.pt").exists():
        sys.exit(f"{args.checkpoint} is not a checkpoint; `make train` writes runs/quickstart/checkpoints/step_grpo_0")
    if args.one:
        print(json.dumps(one(args.one, args.checkpoint, args.prompts, args.batches)))
        return
    results = {name: run_variant(__file__, ["--one", variant, "--checkpoint", str(args.checkpoint),
                                            "--prompts", str(args.prompts), "--batches", str(args.batches)])
               for name, variant in VARIANTS.items()}
    base = results[BASE]
    print_table(f"GRPO rollouts: {args.batches} batches x {args.prompts} prompts x group 4, multi-turn",
                ("variant", "episodes", "rollout s", "prefill s", "positions prefilled", "gen tok/s", "speedup"),
                [(name, str(r["episodes"]), f"{r['wall_s']:.1f}", f"{r['prefill_s']:.1f}", str(r["computed"]),
                  f"{r['generated'] / r['wall_s']:.1f}", f"{base['wall_s'] / r['wall_s']:.2f}x")
                 for name, r in results.items()], width=140)
    print(f"result: multiturn_rollout_speedup={base['wall_s'] / results[ENGINE]['wall_s']:.2f}")


if __name__ == "__main__":
    main()
