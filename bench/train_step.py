"""One GRPO step, embedded trainer vs TRL's GRPOTrainer: same model, LoRA, batch, group size and lengths.

Both generate `group` completions for each of `prompts` task prompts (up to `new_tokens` tokens, T=1)
and take one LoRA update (r=16 on q/k/v/o). Ours runs the real pipeline: SkyRL's generator over
mcp_tool_env (one turn, tool calls executed on the servers), SkyRL's GRPO advantage and PPO loss.
TRL scores the same completions with a pure-Python reward (parse the call, match the expected tool),
which is less work than executing tools. TRL 1.16 needs a newer transformers than SkyRL 0.3.0 allows,
so it runs from its own venv (.venv-trl, see docs/benchmarks.md). Median of the steps after a warm-up.

    .venv/bin/python bench/train_step.py [--steps 3] [--trl-python .venv-trl/bin/python]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def task_prompts(n: int) -> list[dict]:
    from mcprl.data.rules import generate

    return [s.to_dict() for s in generate(n, seed=5, progress=False).samples]


def ours(args: argparse.Namespace) -> list[float]:
    from mcprl.data.sample import SkyRLSample
    from mcprl.training import grpo
    from mcprl.training.config import load_train_config
    from mcprl.training.policy import build_policy
    from mcprl.training.trainer import optimizer_for

    cfg = load_train_config("configs/quickstart.yaml", [
        f"finetune.lora.target_modules=[{','.join(TARGETS)}]", f"algo.group_size={args.group}",
        f"algo.prompts_per_step={args.prompts}", f"algo.micro_batch_size={args.prompts * args.group}",
        f"rollout.max_new_tokens={args.new_tokens}", "rollout.max_turns=1", f"model.threads={args.threads}",
        "logging.wandb.enabled=false"])
    policy = build_policy(cfg)
    tasks = [SkyRLSample.from_dict(t) for t in task_prompts(args.prompts)]
    opt, sched = optimizer_for(policy, 1e-5, 0.0, 0, 100)
    config = grpo.skyrl_algorithm_config(cfg.algo, 1.0)
    sampling = policy.rollouts.sampling(1.0)
    times = []
    for _ in range(args.steps + 1):
        t0 = time.perf_counter()
        result = policy.rollouts.run(tasks, args.group, sampling)
        batch = grpo.build_batch(result.output, result.group_ids)
        # Tiny reward noise gives every group variance, so our update covers every row as TRL's does
        # (the trainer otherwise skips zero-advantage rows, which would flatter this comparison).
        batch.token_rewards = batch.token_rewards + 1e-3 * torch_randn_like(batch.token_rewards)
        grpo.update(policy.model, batch, config, cfg.algo, opt, sched, pad_id=policy.pad_id, temperature=1.0,
                    bf16=policy.bf16)
        policy.engine.sync_weights()
        times.append(time.perf_counter() - t0)
    policy.engine.close()
    return times[1:]


def torch_randn_like(t):
    import torch

    return torch.randn_like(t) * (t != 0)


def trl_side(args: argparse.Namespace) -> list[float]:
    """Runs inside .venv-trl."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from mcprl.envs.parsing import parse_action
    from mcprl.training.model import converted_model_dir

    torch.set_num_threads(args.threads)
    tasks = json.loads(Path(args.tasks).read_text())
    rows = [{"prompt": t["prompt"], "expected": t["reward_spec"]["ground_truth"]["tool_sequence"][0]["tool"]}
            for t in tasks]

    def reward(completions, expected, **_):
        out = []
        for completion, want in zip(completions, expected):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            action = parse_action(text)
            out.append(1.0 if action.kind == "tool_call" and action.name == want else 0.0)
        return out

    class Timer(TrainerCallback):
        def __init__(self):
            self.times, self.t0 = [], None

        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self.t0)

    timer = Timer()
    config = GRPOConfig(output_dir=args.out, per_device_train_batch_size=args.prompts * args.group,
                        num_generations=args.group, max_completion_length=args.new_tokens, max_steps=args.steps + 1,
                        learning_rate=1e-5, use_cpu=True, bf16=args.bf16, gradient_checkpointing=False,
                        logging_steps=1, report_to=[], save_strategy="no", temperature=1.0, seed=0,
                        dataloader_num_workers=0)
    trainer = GRPOTrainer(model=str(converted_model_dir()), reward_funcs=[reward], args=config,
                          train_dataset=Dataset.from_list(rows * (args.steps + 1)),
                          peft_config=LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, task_type="CAUSAL_LM"),
                          callbacks=[timer])
    trainer.train()
    return timer.times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trl-python", default=".venv-trl/bin/python")
    parser.add_argument("--side", choices=["trl"], help=argparse.SUPPRESS)
    parser.add_argument("--tasks", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="runs/bench_trl", help=argparse.SUPPRESS)
    parser.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side == "trl":
        print(json.dumps(trl_side(args)))
        return

    from rich.console import Console
    from rich.table import Table

    tasks_file = Path(args.out) / "tasks.json"
    tasks_file.parent.mkdir(parents=True, exist_ok=True)
    tasks_file.write_text(json.dumps(task_prompts(args.prompts)))
    results = {"mcprl embedded (SkyRL generator + env + registries)": ours(args)}
    if not Path(args.trl_python).exists():
        sys.exit(f"TRL venv missing: {args.trl_python} (see docs/benchmarks.md for the install)")
    for bf16 in (False, True):
        cmd = [args.trl_python, __file__, "--side", "trl", "--tasks", str(tasks_file), "--out", args.out,
               "--steps", str(args.steps), "--prompts", str(args.prompts), "--group", str(args.group),
               "--new-tokens", str(args.new_tokens), "--threads", str(args.threads), *(["--bf16"] if bf16 else [])]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            continue
        results[f"TRL 1.16 GRPOTrainer ({'bf16' if bf16 else 'fp32'})"] = json.loads(out.stdout.strip().splitlines()[-1])
    table = Table(title=f"one GRPO step: {args.prompts} prompts x group {args.group}, <= {args.new_tokens} new tokens, "
                        f"LoRA r=16 q/k/v/o, {args.threads} threads")
    for col in ("trainer", "median s/step", "steps"):
        table.add_column(col)
    medians = {name: statistics.median(ts) for name, ts in results.items()}
    for name, times in results.items():
        table.add_row(name, f"{medians[name]:.1f}", " ".join(f"{t:.1f}" for t in times))
    Console().print(table)
    ours_s = medians.pop("mcprl embedded (SkyRL generator + env + registries)")
    if not medians:
        sys.exit("TRL did not run; see the error above")
    print(f"result: step_time_vs_trl={ours_s / min(medians.values()):.2f} (target <= 0.7)")


if __name__ == "__main__":
    main()
