"""The trainer's SFT step with the collector scanning the whole heap after every step, against the heap
alive at the start kept out of its scans (`long_lived_heap`, the trainer's default), side by side.

`release_memory` runs `gc.collect()` after each step so that the heap trim finds freed memory; in the
trainer's process the heap holds ~600k objects (modules, the model, the tokenizer, the in-process servers'
data), and a full collection walks them all every step. Each variant runs the quickstart's SFT (one demo a
step, no evals) in its own process; the losses must come out identical.

    .venv/bin/python bench/gc_freeze.py            # 30 SFT steps a variant
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from side_by_side import print_table, run_variant

VARIANTS = {"whole heap scanned each step (before)": "whole", "heap at start frozen (now)": "frozen"}


def one(variant: str, steps: int) -> dict[str, object]:
    import contextlib
    import gc
    import time

    from mcprl.models import devices
    from mcprl.training import trainer
    from mcprl.training.config import load_train_config

    if variant == "whole":
        trainer.long_lived_heap = contextlib.nullcontext
    collect, spent = gc.collect, []

    def timed(*args: object) -> int:
        t0 = time.perf_counter()
        found = collect(*args)
        spent.append(time.perf_counter() - t0)
        return found

    devices.gc.collect = timed  # the module's `gc` is the gc module: this times every caller's collection
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        cfg = load_train_config("configs/quickstart.yaml", [
            f"run.output_dir={run}", f"data.train={Path(tmp) / 'train.jsonl'}", f"data.eval={Path(tmp) / 'test.jsonl'}",
            "data.generate.n_train=60", "data.generate.n_eval=2", f"sft.max_steps={steps}", "eval.before=false",
            "eval.after_sft=false", "logging.wandb.enabled=false", "logging.console_every=0"])
        trainer.train(cfg, sft_only=True)
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    sft = [r for r in rows if r.get("phase") == "sft"]
    return {"s_per_step": sum(r["sft/step_s"] for r in sft[1:]) / (len(sft) - 1), "gc_s": sum(spent) / len(spent),
            "objects": len(gc.get_objects()), "losses": [r["sft/loss"] for r in sft]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", choices=sorted(set(VARIANTS.values())))
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.steps)))
        return
    results = {name: run_variant(__file__, ["--one", key, "--steps", str(args.steps)]) for name, key in VARIANTS.items()}
    before, now = results.values()
    print_table(f"SFT step in the trainer's process, {args.steps} steps (the first left out of s/step)",
                ("variant", "s/step", "speed-up", "s per collection", "objects at the end"),
                [(name, f"{r['s_per_step']:.3f}", f"{before['s_per_step'] / r['s_per_step']:.2f}x", f"{r['gc_s']:.3f}",
                  f"{r['objects']:,}") for name, r in results.items()], width=110)
    same = before["losses"] == now["losses"]
    print(f"result: speedup={before['s_per_step'] / now['s_per_step']:.3f} same_losses={same}")


if __name__ == "__main__":
    main()
