"""One GRPO step, embedded trainer vs TRL 1.16's GRPOTrainer, on equal work.

Both sides, per step: the same `prompts` task prompts (system prompt listing the tools + user turn,
SmolLM2's own chat template) x `group` completions, one turn, sampled at T=1 up to `new_tokens` new
tokens; then one optimizer step (AdamW, lr 1e-5, grad clip 1.0) over all prompts x group rows, in
micro-batches of `--micro-batch` rows, with LoRA r=16 / alpha 32 / no dropout on q/k/v/o of all 30
layers (the quickstart's `top_layers` restriction is lifted: both train the same adapter).
Precision (`--dtype`): the same on both sides. `auto` (default) is what `model.dtype: auto` picks:
bf16 on a CPU with AMX or AVX512-BF16 (fp32 master weights under bf16 autocast: our `dtype: bfloat16`,
TRL's `bf16=True`), else fp32 (bf16 is emulated and slower there). No gradient checkpointing, no
KL/reference model, the prompt's backward pass kept (`experimental.grpo_detach=none`: TRL's gradient is
exact), `torch` intra-op threads = `--threads` on both.

- Ours runs the real pipeline: SkyRL's generator over mcp_tool_env (tool calls executed on the MCP
  servers, heuristic reward), generation on the merged-LoRA copy with the prefix cache, SkyRL's GRPO
  advantage and PPO loss, weight re-sync. A 1e-3 reward jitter gives every group variance, so every
  row is trained, as in TRL (ours otherwise skips zero-advantage rows, which would flatter it).
- TRL: plain `model.generate` on the PEFT model, a pure-Python reward (the same call parser, matched
  against the expected first tool: cheaper than executing tools), DAPO loss (its default).
  Stop strings are not passed (HF generate needs the tokenizer for them), so the table shows the mean
  completion length of each side: equal lengths mean equal decode work.

Each side runs in its own process (peak memory is per side); TRL 1.16 needs a newer transformers
than SkyRL 0.3.0 allows, so its process uses its own venv (.venv-trl, `make bench-trl`). One warm-up
step, then the median of `--steps` timed steps. Defaults fit the shared 2-core, 23 GiB box: 1 thread
(2 threads stall when the other core is busy) and micro-batches of 8 (TRL with all 16 rows in one
micro-batch peaked at 12.5 GiB and was OOM-killed next to a training run).

    .venv/bin/python bench/train_step.py [--steps 3] [--threads 1] [--micro-batch 8] [--dtype auto]
                                         [--trl-python .venv-trl/bin/python] [--model NAME_OR_DIR] [--device cpu|cuda]

On a GPU (`--device cuda`), both sides generate and train there; `--model` takes any checkpoint
directory (bench/random_model.py builds a 0.5B-class one where real weights cannot travel).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

from mcprl.models.loading import DEFAULT_MODEL
from side_by_side import print_table, run_variant

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
LR = 1e-5


def task_prompts(n: int) -> list[dict]:
    from mcprl.data.rules import generate

    return [s.to_dict() for s in generate(n, seed=5, progress=False).samples]


def peak_memory() -> dict:
    import torch

    gpu = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None
    return {"peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "peak_gpu_gb": gpu}


def versions(*packages: str) -> dict[str, str]:
    return {p: importlib.metadata.version(p) for p in packages}


def ours(args: argparse.Namespace) -> dict:
    import torch

    from mcprl.data.sample import SkyRLSample
    from mcprl.training import grpo
    from mcprl.training.config import load_train_config
    from mcprl.models.devices import release_memory
    from mcprl.training.policy import build_policy
    from mcprl.training.optim import optimizer_for

    cfg = load_train_config("configs/quickstart.yaml", [
        f"model.name={args.model}", f"model.device={args.device}",
        f"finetune.lora.target_modules=[{','.join(TARGETS)}]", "finetune.top_layers=null",
        "finetune.lora.r=16", "finetune.lora.alpha=32", "finetune.lora.dropout=0.0",
        "finetune.gradient_checkpointing=false", f"model.dtype={args.dtype}", f"model.threads={args.threads}",
        f"algo.group_size={args.group}", f"algo.prompts_per_step={args.prompts}",
        f"algo.micro_batch_size={args.micro_batch}", "algo.kl_coef=0.0", "algo.epochs=1", "algo.grad_clip=1.0",
        "experimental.grpo_detach=none", f"rollout.max_new_tokens={args.new_tokens}", "rollout.max_turns=1",
        "rollout.temperature=1.0",
        "logging.wandb.enabled=false"])
    policy = build_policy(cfg)
    tasks = [SkyRLSample.from_dict(t) for t in json.loads(Path(args.tasks).read_text())]
    opt, sched = optimizer_for(policy, LR, 0.0, 0, 100)
    config = grpo.skyrl_algorithm_config(cfg.algo, 1.0)
    sampling = policy.rollouts.sampling(1.0)
    steps = []
    for _ in range(args.steps + 1):
        t0 = time.perf_counter()
        result = policy.rollouts.run(tasks, args.group, sampling)
        t1 = time.perf_counter()
        policy.model.train()
        batch = grpo.build_batch(result.output, result.group_ids)
        # Reward jitter on each row's last token: every row trains, as in TRL (see the docstring).
        last = torch.tensor([len(ids) - p - 1 for ids, p in zip(batch.input_ids, batch.prompt_lens)])
        batch.token_rewards[torch.arange(batch.size), last] += 1e-3 * torch.randn(batch.size)
        metrics = grpo.update(policy.model, batch, config, cfg.algo, opt, sched, pad_id=policy.pad_id,
                              temperature=1.0, bf16=policy.bf16)
        policy.engine.sync_weights()
        release_memory()
        t2 = time.perf_counter()
        assert metrics["active_rows"] == args.prompts * args.group, metrics
        steps.append({"total": t2 - t0, "rollout": t1 - t0, "update": t2 - t1,
                      "tokens": statistics.mean(len(r) for r in result.output["response_ids"]),
                      "threads": torch.get_num_threads()})
    policy.engine.close()
    return {"steps": steps[1:], "versions": versions("skyrl", "transformers", "peft", "torch"), **peak_memory()}


def trl_side(args: argparse.Namespace) -> dict:
    """Runs inside .venv-trl."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from mcprl.protocol.parsing import parse_action
    from mcprl.models.loading import resolve_model

    torch.set_num_threads(args.threads)
    tasks = json.loads(Path(args.tasks).read_text())
    rows = [{"prompt": t["prompt"], "expected": t["reward_spec"]["ground_truth"]["tool_sequence"][0]["tool"]}
            for t in tasks]

    def reward(completions, expected, **_):
        out = []
        for completion, want in zip(completions, expected):
            action = parse_action(completion[-1]["content"])
            out.append(1.0 if action.kind == "tool_call" and action.name == want else 0.0)
        return out

    class Timer(TrainerCallback):
        """Step wall time, the rollout part of it (`_generate_and_score_completions`), completion length."""

        def __init__(self):
            self.steps, self.t0, self.rollout = [], 0.0, 0.0

        def on_step_begin(self, *a, **k):
            self.t0, self.rollout = time.perf_counter(), 0.0

        def on_step_end(self, *a, **k):
            total = time.perf_counter() - self.t0
            self.steps.append({"total": total, "rollout": self.rollout, "update": total - self.rollout,
                               "threads": torch.get_num_threads()})

        def on_log(self, args, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                self.steps[-1]["tokens"] = logs["completions/mean_length"]

    timer = Timer()
    config = GRPOConfig(output_dir=args.out, per_device_train_batch_size=args.micro_batch,
                        gradient_accumulation_steps=args.prompts * args.group // args.micro_batch,
                        num_generations=args.group,
                        max_completion_length=args.new_tokens, max_steps=args.steps + 1, learning_rate=LR,
                        max_grad_norm=1.0, beta=0.0, use_cpu=args.device == "cpu", bf16=args.dtype == "bfloat16",
                        gradient_checkpointing=False,
                        model_init_kwargs={"dtype": torch.float32}, temperature=1.0, logging_steps=1,
                        report_to=[], save_strategy="no", disable_tqdm=True, seed=0, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=str(resolve_model(args.model)), reward_funcs=[reward], args=config,
                          train_dataset=Dataset.from_list(rows * (args.steps + 1)),
                          peft_config=LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS,
                                                 task_type="CAUSAL_LM"),
                          callbacks=[timer])
    generate = trainer._generate_and_score_completions

    def timed_generate(*a, **k):
        t0 = time.perf_counter()
        out = generate(*a, **k)
        timer.rollout += time.perf_counter() - t0
        return out

    trainer._generate_and_score_completions = timed_generate
    trainer.train()
    return {"steps": timer.steps[1:], "versions": versions("trl", "transformers", "peft", "torch"), **peak_memory()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side, after one warm-up step")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=8, help="rows per forward/backward (divides the batch)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto",
                        help="auto: bf16 where the CPU has native bf16, else fp32 (both sides)")
    parser.add_argument("--trl-python", default=".venv-trl/bin/python")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model alias, HF id in the local cache, or directory")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--tasks", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="runs/bench_trl", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if (args.prompts * args.group) % args.micro_batch:
        sys.exit(f"--micro-batch {args.micro_batch} must divide prompts x group = {args.prompts * args.group}")
    if args.side:
        print(json.dumps((ours if args.side == "ours" else trl_side)(args)))
        return
    if args.dtype == "auto":
        from mcprl.models.devices import pick_dtype

        args.dtype = str(pick_dtype(args.device)).removeprefix("torch.")
    if not Path(args.trl_python).exists():
        sys.exit(f"TRL venv missing: {args.trl_python} (`make bench-trl` creates it)")

    tasks_file = Path(args.out) / "tasks.json"
    tasks_file.parent.mkdir(parents=True, exist_ok=True)
    tasks_file.write_text(json.dumps(task_prompts(args.prompts)))
    common = ["--tasks", str(tasks_file), "--out", args.out, "--steps", str(args.steps), "--prompts", str(args.prompts),
              "--group", str(args.group), "--new-tokens", str(args.new_tokens), "--micro-batch", str(args.micro_batch),
              "--threads", str(args.threads), "--dtype", args.dtype, "--model", args.model, "--device", args.device]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    sides = {"mcprl embedded (SkyRL + MCP env)": (sys.executable, "ours"),
             "TRL 1.16 GRPOTrainer": (args.trl_python, "trl")}
    results, load = {}, {}
    for name, (python, side) in sides.items():
        load[f"{side} start"] = os.getloadavg()
        results[name] = run_variant(__file__, ["--side", side, *common], python=python, env=env)
        print(f"{name}: median {statistics.median(s['total'] for s in results[name]['steps']):.1f} s/step", flush=True)
    load["end"] = os.getloadavg()

    rows = args.prompts * args.group
    medians, table = {}, []
    for name, res in results.items():
        steps = res["steps"]
        med = {k: statistics.median(s[k] for s in steps) for k in ("total", "rollout", "update", "tokens")}
        medians[name] = med["total"]
        table.append((name, f"{med['total']:.1f}", f"{med['rollout']:.1f}", f"{med['update']:.1f}",
                      f"{med['tokens']:.1f}", f"{res['peak_rss_gb']:.1f}",
                      "-" if res["peak_gpu_gb"] is None else f"{res['peak_gpu_gb']:.1f}", " ".join(f"{s['total']:.1f}" for s in steps)))
    print_table(f"one GRPO step on {args.device}, {args.model}: {args.prompts} prompts x group {args.group}, <= {args.new_tokens} new tokens, LoRA "
                f"r=16 q/k/v/o, {args.dtype}, {rows // args.micro_batch} micro-batches of {args.micro_batch}, "
                f"{args.threads} thread(s)",
                ("variant", "median s/step", "rollout s", "update s", "tokens/completion", "peak RSS GiB", "peak GPU GiB",
                 "steps s"),
                table, width=150)
    for name, res in results.items():
        print(f"{name}: threads {sorted({s['threads'] for s in res['steps']})}, {res['versions']}")
    print("load average (1/5/15 min): "
          + "; ".join(f"{k} {' '.join(f'{x:.2f}' for x in v)}" for k, v in load.items()))
    ours_s, trl_s = medians.values()
    print(f"result: step_time_vs_trl={ours_s / trl_s:.2f} (target <= 0.7)")


if __name__ == "__main__":
    main()
