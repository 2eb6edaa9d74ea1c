"""The SFT phase: the expert demos' assistant turns, to sft.max_steps or sft.epochs, from the run's checkpoint."""

from __future__ import annotations

import math
import random
import time
from typing import Any

import torch
from rich.progress import Progress

from mcprl.data.sample import SkyRLSample
from mcprl.models.devices import release_memory, rss_gb
from mcprl.training.checkpoint import load_checkpoint, save_checkpoint
from mcprl.training.optim import optimizer_for
from mcprl.training.run import Run, console
from mcprl.training.sft import (
    WeightAverage,
    batches,
    load_experts,
    noisy_embeddings,
    sft_step,
    tokenize_conversation,
)


def demo_families(experts: list[dict[str, Any]], train_tasks: list[SkyRLSample]) -> list[str]:
    """Each demo's task family; a demo of no training task shares the family "" with the others like it."""
    family_of = {t.task_id: t.family for t in train_tasks}
    return [family_of.get(e.get("task_id"), "") for e in experts]


def run_sft(run: Run) -> None:
    cfg, policy, state = run.cfg, run.policy, run.state
    experts = load_experts(run.experts_path)
    examples = [tokenize_conversation(e["messages"], policy.tokenizer, cfg.sft.max_seq_len) for e in experts]
    families = demo_families(experts, run.train_tasks) if cfg.sft.order == "stratified" else None
    total = cfg.sft.max_steps or max(1, math.ceil(cfg.sft.epochs * len(examples) / cfg.sft.batch_size))
    opt, sched = optimizer_for(policy, cfg.sft.lr, 0.0, cfg.sft.warmup_steps, total, cfg.sft.lr_scheduler)
    generators = {"engine": policy.engine.generator}
    averaged = WeightAverage(policy.trainable_parameters(), cfg.sft.ema_decay) if cfg.sft.ema_decay else None
    if run.checkpoint is not None:
        load_checkpoint(run.checkpoint, policy.model, opt, sched, generators, averaged)
    stream = batches(examples, cfg.sft.batch_size, random.Random(f"{cfg.run.seed}:sft"), families)
    for _ in range(state.sft_batches_drawn):
        next(stream)
    policy.model.train()
    with noisy_embeddings(policy.model, cfg.sft.neftune_alpha), Progress(console=console, transient=True) as bar:
        job = bar.add_task("SFT", total=total, completed=state.sft_step)
        while state.sft_step < total and not run.clock.over(cfg.sft.max_seconds):
            t0 = time.perf_counter()
            metrics = sft_step(policy.model, next(stream), policy.pad_id, micro_batch_size=cfg.sft.micro_batch_size,
                               bf16=policy.bf16, detach=cfg.sft.detach)
            state.sft_batches_drawn += 1
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), cfg.algo.grad_clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if averaged is not None:
                averaged.update()
            release_memory()
            state.sft_step += 1
            run.callbacks.on_step(state.sft_step, {"phase": "sft", "time_s": time.perf_counter() - t0, **metrics,
                                                   "grad_norm": float(grad_norm), "lr": sched.get_last_lr()[0],
                                                   "rss_gb": rss_gb()})
            bar.advance(job)
            if cfg.sft.save_every and state.sft_step % cfg.sft.save_every == 0:
                state.elapsed_s = run.clock.total
                run.callbacks.on_checkpoint(state.sft_step, save_checkpoint(
                    run.dir, state, policy.model, policy.tokenizer, opt, sched, generators, averaged=averaged))
    if averaged is not None:
        averaged.apply()
    policy.engine.sync_weights()
    release_memory()
