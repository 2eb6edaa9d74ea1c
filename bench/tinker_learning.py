"""The learning check of `--engine tinker`: from the same warm start, do GRPO steps on the local Tinker server and
on the embedded engine move held-out success the same way?

    .venv/bin/python bench/tinker_learning.py runs/tinker_qs            # after `mcprl train --engine tinker ...`
    .venv/bin/python bench/tinker_learning.py runs/tinker_qs --table    # the table only, from finished runs

The Tinker run's warm start (`checkpoints/step_grpo_0`, its SFT adapter) is merged into full weights; the embedded
engine then runs the same GRPO recipe from them (the Tinker run's config, its steps, data and seed) with a fresh
adapter of the same rank at the same learning rate, so both engines start from one policy (evaluated once, in
the Tinker run). Every eval runs on this machine's engine, greedily (deterministic), so the table pairs task by
task: each engine's GRPO against the warm start, and the two engines' results against each other.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from mcprl.eval.compare import paired_results
from mcprl.eval.results import load_results
from mcprl.training.config import load_train_config
from mcprl.training.tinker.run import lora_rank, lr_scale


def merge_warm_start(tinker_run: Path, out: Path) -> Path:
    """The Tinker warm start's adapter merged into the base weights: a model directory any engine loads."""
    from mcprl.training.policy import load_policy_weights

    if (out / "config.json").exists():
        return out
    model, tokenizer = load_policy_weights(str(tinker_run / "checkpoints" / "step_grpo_0"))
    model.merge_and_unload().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def embedded_grpo(tinker_run: Path, warm: Path, out: Path) -> None:
    """The Tinker run's recipe on the embedded engine from the merged warm start (LoRA, the same rank and lr)."""
    cfg = load_train_config(tinker_run / "config.yaml")
    overrides = {"run.output_dir": str(out), "run.name": "tinker_learning_embedded", "model.name": str(warm),
                 "sft.enabled": "false", "finetune.mode": "lora", "finetune.lora.r": str(lora_rank(cfg)),
                 "algo.lr": str(cfg.algo.lr * lr_scale(cfg)), "eval.before": "false", "eval.after_sft": "false"}
    cmd = [sys.executable, "-m", "mcprl.cli", "train", "-c", str(tinker_run / "config.yaml"),
           *(["--resume"] if (out / "checkpoints" / "latest").exists() else [])]
    for key, value in overrides.items():
        cmd += ["-o", f"{key}={value}"]
    subprocess.run(cmd, check=True)


def rates(results: dict, no_demo_families: list[str]) -> tuple[float, float, int]:
    """pass@1 overall and on the run's families without demos (with their task count)."""
    families = results.get("task_family", {})
    no_demo = [v for task, v in results["per_task"].items() if families.get(task) in no_demo_families]
    return results["overall"]["pass@1"], sum(no_demo) / max(len(no_demo), 1), len(no_demo)


def table(tinker_run: Path, embedded_run: Path) -> str:
    # One warm start for both: the Tinker run's eval of it (its adapter; the embedded run starts from it merged)
    arms = {"tinker": (tinker_run, "grpo"), "embedded": (embedded_run, "grpo")}
    no_demo = load_train_config(tinker_run / "config.yaml").data.generate.no_demo_families
    header = "| held-out set | engine | warm start pass@1 | after GRPO | no-demo families | GRPO vs warm start (better / worse, p) |"
    lines = [header, "|---|---|---|---|---|---|"]
    after = {}
    for prefix, label in (("eval", "generated"), ("eval_natural", "natural")):
        for engine, (run, grpo) in arms.items():
            a, b = load_results(tinker_run / f"{prefix}_sft"), load_results(run / f"{prefix}_{grpo}")
            after[label, engine] = b
            test = paired_results(a, b)
            (ra, nda, n), (rb, ndb, _) = rates(a, no_demo), rates(b, no_demo)
            lines.append(f"| {label} | {engine} | {100 * ra:.1f}% | {100 * rb:.1f}% | {100 * nda:.1f}% -> "
                         f"{100 * ndb:.1f}% ({n}) | {test.better} / {test.worse}, p = {test.p_value:.2f} |")
        test = paired_results(after[label, "embedded"], after[label, "tinker"])
        lines.append(f"| {label} | tinker vs embedded after GRPO | | | | {test.better} / {test.worse}, "
                     f"p = {test.p_value:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tinker_run", type=Path)
    parser.add_argument("--out", type=Path, default=Path("runs/tinker_learning"))
    parser.add_argument("--table", action="store_true", help="print the table of finished runs only")
    args = parser.parse_args()
    warm = args.tinker_run / "checkpoints" / "step_grpo_0"
    if not (warm / "trainer_state.json").exists():
        sys.exit(f"error: {args.tinker_run} has no warm start yet ({warm})")
    if not json.loads((warm / "trainer_state.json").read_text()).get("tinker"):
        sys.exit(f"error: {args.tinker_run} was not trained with --engine tinker")
    if not args.table:
        embedded_grpo(args.tinker_run, merge_warm_start(args.tinker_run, args.out / "warm_start"), args.out / "embedded")
    if not (args.tinker_run / "eval_grpo").is_dir():
        sys.exit(f"the Tinker run's GRPO has not finished: run this again with --table once it has ({args.tinker_run})")
    print(table(args.tinker_run, args.out / "embedded"))


if __name__ == "__main__":
    main()
