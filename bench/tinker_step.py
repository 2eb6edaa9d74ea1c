"""One GRPO step, embedded engine vs `--engine tinker` on SkyRL's local Tinker server (JAX, CPU), side by
side: the same tasks, seed, group size and LoRA, each engine in a fresh process.

    .venv/bin/python bench/tinker_step.py [--steps 3] [--model smollm2-135m] [--quick]

Each variant trains `--steps` GRPO steps of the quickstart's shape (4 prompts x 4 samples, up to 6 turns
of 96 tokens, one sample batch a step) from the base model, LoRA r=16 on both. The reward is the parity
of each turn's length, so every group has variance and every step trains (the heuristic reward on an
untrained model ties every group and a step would train nothing). Step 1 is reported apart: on the
Tinker server it JIT-compiles each new shape. Later steps are averaged: sample s (rollouts), train s
(forward/backward + optimizer), sync s (the sampler's new weights), generated tokens/s.
`--quick` runs a tiny random llama for a check of the script (seconds, numbers meaningless).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from side_by_side import print_table, run_variant

ROOT = Path(__file__).resolve().parents[1]


class LengthParity:
    """reward.fn for the bench: 1 for a turn of odd length, else 0."""

    def reset(self, ground_truth):
        pass

    def step(self, step):
        from mcprl.rewards.base import Reward

        return Reward(float(len(step.action) % 2))

    def end(self, reason):
        from mcprl.rewards.base import NO_REWARD

        return NO_REWARD


def tiny_model(out: Path) -> Path:
    import torch

    from mcprl.models.loading import ensure_default_model
    from random_model import build

    build("tiny-llama", ensure_default_model(), out, dtype=torch.float32)
    return out


def one(engine: str, model: str, steps: int, out: Path) -> dict[str, float]:
    from mcprl.training.config import load_train_config

    overrides = [
        f"model.name={model}", "finetune.mode=lora", "finetune.lora.r=16", "tinker.lora_rank=16",
        "reward.fn=tinker_step:LengthParity", "sft.enabled=false", "eval.before=false", "eval.after_sft=false",
        "eval.after_grpo=false", f"algo.steps={steps}", "algo.save_every=0", "algo.dynamic_sampling.max_sample_batches=1",
        "algo.warmup_steps=0", "logging.wandb.enabled=false", "logging.console_every=0", "logging.rollouts=false",
        f"run.output_dir={out}", f"data.train={ROOT / 'data/processed/quickstart_train.jsonl'}",
        f"data.eval={ROOT / 'data/processed/quickstart_test.jsonl'}", "data.regenerate=false"]
    cfg = load_train_config(ROOT / "configs/quickstart.yaml", overrides)
    t0 = time.perf_counter()
    if engine == "tinker":
        from mcprl.training.tinker.run import train
    else:
        from mcprl.training.trainer import train
    train(cfg)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("phase") == "grpo"]

    def split(row: dict) -> dict[str, float]:
        sample = row.get("time/sample_s", row["time/rollout_s"])
        sync = row.get("time/sync_s", 0.0)  # embedded: the in-place weights need none
        train_s = row.get("time/train_s", row["time/step_s"] - sample - sync)
        return {"step": row["time/step_s"], "sample": sample, "train": train_s, "sync": sync,
                "tok_s": row["rollout/tok_s"], "active": row.get("update/active_rows", 0.0)}

    first, later = split(rows[0]), [split(r) for r in rows[1:]] or [split(rows[0])]
    mean = {k: sum(r[k] for r in later) / len(later) for k in later[0]}
    return {"first_step": first["step"], **mean, "wall": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variant")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(one(args.variant, args.model, args.steps, Path(args.out))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = str(tiny_model(Path(tmp) / "tiny")) if args.quick else args.model
        steps = 2 if args.quick else args.steps
        results = {name: run_variant(__file__, ["--variant", name, "--model", model, "--steps", str(steps),
                                                "--out", str(Path(tmp) / name)])
                   for name in ("embedded", "tinker")}
    e, t = results["embedded"], results["tinker"]
    rows = [[name, f"{r['first_step']:.1f}", f"{r['step']:.1f}", f"{r['sample']:.1f}", f"{r['train']:.1f}",
             f"{r['sync']:.2f}", f"{r['tok_s']:.0f}", f"{r['active']:.0f}"] for name, r in results.items()]
    rows.append(["tinker / embedded", f"{t['first_step'] / e['first_step']:.1f}x", f"{t['step'] / e['step']:.1f}x",
                 f"{t['sample'] / e['sample']:.1f}x", f"{t['train'] / max(e['train'], 1e-9):.1f}x", "",
                 f"{t['tok_s'] / max(e['tok_s'], 1e-9):.2f}x", ""])
    print_table(f"One GRPO step ({'tiny llama, --quick' if args.quick else args.model}; steps after the first "
                f"averaged over {steps - 1})",
                ["engine", "step 1 s", "step s", "sample s", "train s", "sync s", "tok/s", "rows trained"], rows)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
