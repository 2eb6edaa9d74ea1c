"""The GRPO phase: rollouts through SkyRL's generator (and its dynamic sampling), SkyRL's advantages and
losses (training/grpo.py), one optimizer step a step, from the run's checkpoint; the experimental knobs
attach through their hooks (loop/hooks.py)."""

from __future__ import annotations

import contextlib
import time
from functools import partial
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from loguru import logger
from rich.progress import MofNCompleteColumn, Progress, TaskID

from mcprl._skyrl import handle_dynamic_sampling
from mcprl.data.sample import SkyRLSample
from mcprl.envs.mcp_env import MCPToolEnv
from mcprl.models.devices import release_memory, rss_gb
from mcprl.training import grpo
from mcprl.training.checkpoint import TrainState, load_checkpoint, save_checkpoint
from mcprl.training.config import CRITIC_ESTIMATORS, AlgoConfig
from mcprl.training.critic import Critic, build_critic
from mcprl.training.experimental import grpo_hooks
from mcprl.training.loop.hooks import Guide
from mcprl.training.loop.prompts import grpo_prompts
from mcprl.training.optim import optimizer_for
from mcprl.training.policy import Policy
from mcprl.training.reference import kl_reference
from mcprl.training.rollout import RolloutResult, write_rollouts
from mcprl.training.run import Run, console

logger.disable("skyrl.train.utils.trainer_utils")  # dynamic sampling's banners; the step metrics say the same


def run_grpo(run: Run) -> Critic | None:
    """GRPO (PPO with a critic under GAE) to algo.steps; returns the critic, which the final checkpoint keeps."""
    cfg, policy, state, algo = run.cfg, run.policy, run.state, run.cfg.algo
    opt, sched = optimizer_for(policy, algo.lr, algo.weight_decay, algo.warmup_steps, algo.steps, algo.lr_scheduler)
    generators = {"engine": policy.engine.generator}
    critic = (build_critic(cfg, next(policy.model.parameters()).device)
              if algo.advantage_estimator in CRITIC_ESTIMATORS else None)
    if run.checkpoint is not None:
        load_checkpoint(run.checkpoint, policy.model, opt, sched, generators)
        if critic is not None and state.grpo_step > 0:  # step_grpo_0 (the warm start) has no critic yet
            critic.load(run.checkpoint)
    if state.grpo_step == 0:
        state.warm_start = str(Path(run.checkpoint).resolve()) if run.checkpoint is not None else None
    reference = kl_reference(policy.model, algo.kl_coef, state, cfg.model.name)
    config = grpo.skyrl_algorithm_config(algo, cfg.rollout.temperature)
    hooks = grpo_hooks(run)
    stream = grpo_prompts(run, hooks)
    sampling = policy.rollouts.sampling(cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.top_k)
    guides = [guide for hook in hooks if (guide := hook.guide(sampling)) is not None]
    guide = guides[0] if guides else None  # one hook guides at most (experimental.expert_guidance)

    def save() -> Path:
        state.elapsed_s = run.clock.total
        return save_checkpoint(run.dir, state, policy.model, policy.tokenizer, opt, sched, generators,
                               also=critic.save if critic is not None else None)

    for hook in hooks:
        hook.begin(save)
    with grpo_progress("GRPO", algo.steps, state.grpo_step) as (bar, job, episodes):
        while state.grpo_step < algo.steps:
            t0 = time.perf_counter()
            policy.engine.reset_stats()
            bar.reset(episodes)
            output, uids, results = sample_step_batch(policy, algo, stream, state, sampling, (bar, episodes), guide)
            t_rollout = time.perf_counter() - t0
            policy.model.train()
            batch = grpo.build_batch(output, uids)
            train_policy = critic is None or state.grpo_step >= cfg.critic.warmup_steps
            metrics = grpo.update(policy.model, batch, config, algo, opt, sched, pad_id=policy.pad_id,
                                  temperature=cfg.rollout.temperature, bf16=policy.bf16, ref_model=reference,
                                  experimental=cfg.experimental, critic=critic, train_policy=train_policy)
            if critic is not None:
                metrics["critic_only"] = float(not train_policy)
            policy.engine.sync_weights()
            release_memory()
            state.grpo_step += 1
            step_metrics = {"phase": "grpo", "time_s": time.perf_counter() - t0, "rollout_s": t_rollout,
                            "rollout_tok_s": policy.engine.stats.tokens_per_second,
                            **rollout_metrics(results, algo.group_size),
                            **{k: v for hook in hooks for k, v in hook.metrics(results).items()},
                            **metrics, "rss_gb": rss_gb()}
            if cfg.logging.rollouts:
                write_rollouts(run.dir / "rollouts" / f"grpo_step_{state.grpo_step}.jsonl", results)
            keep = [hook.after_step(opt, step_metrics) for hook in hooks]
            run.callbacks.on_step(state.grpo_step, step_metrics)
            bar.advance(job)
            if any(keep) or (algo.save_every and state.grpo_step % algo.save_every == 0):
                run.callbacks.on_checkpoint(state.grpo_step, save())
    return critic


@contextlib.contextmanager
def grpo_progress(label: str, steps: int, done: int) -> Iterator[tuple[Progress, TaskID, TaskID]]:
    """The GRPO phase's two bars, for every engine: its steps, and the current step's episodes."""
    with Progress(*Progress.get_default_columns(), MofNCompleteColumn(), console=console, transient=True) as bar:
        yield bar, bar.add_task(label, total=steps, completed=done), bar.add_task("rollouts", total=None)


def sample_step_batch(policy: Policy, algo: AlgoConfig, stream: Iterator[SkyRLSample], state: TrainState,
                      sampling: dict[str, Any], episodes: tuple[Progress, TaskID] | None = None,
                      guide: Guide | None = None) -> tuple[dict[str, Any], list[str], list[RolloutResult]]:
    """One step's rollouts, through SkyRL's dynamic sampling when configured.

    Group ids carry the draw position, so a task drawn twice in one step makes two groups. When
    `max_sample_batches` runs out, the step trains on what it collected (SkyRL's trainer stops instead:
    on one machine a step without a full batch beats losing the run). `episodes`, a progress bar and its
    task, counts the rollouts as they end; each further sample batch adds its episodes to the total.
    `guide` changes each sample batch's output before the filter sees it (experimental.expert_guidance).
    """
    ds = algo.dynamic_sampling
    settings = {"type": ds.type, "max_sample_batches": ds.max_sample_batches, "min_replace_ratio": ds.min_replace_ratio,
                "train_batch_size": algo.prompts_per_step, "n_samples_per_prompt": algo.group_size}
    collected: dict[str, Any] = {"sample_batch_count": 0}
    results: list[RolloutResult] = []
    env_metrics: dict[str, list[Any]] = {}  # per group, in row order: SkyRL's filter drops the column
    while True:
        prompts = [next(stream) for _ in range(algo.prompts_per_step)]
        first = state.grpo_prompts_drawn
        state.grpo_prompts_drawn += len(prompts)
        on_episode = None
        if episodes is not None:
            bar, job = episodes
            n_batch = collected["sample_batch_count"] + 1
            bar.update(job, total=n_batch * len(prompts) * algo.group_size,
                       description="rollouts" if n_batch == 1 else f"rollouts (sample batch {n_batch})")
            on_episode = partial(bar.advance, job)
        result = policy.rollouts.run(prompts, algo.group_size, sampling, on_episode)
        results.append(result)
        uids = [f"{first + i // algo.group_size}:{g}" for i, g in enumerate(result.group_ids)]
        output = result.output
        if guide is not None:
            output = guide(result, uids)
        for uid, metrics in zip(uids, output.get("env_metrics") or [None] * len(uids)):
            env_metrics.setdefault(uid, []).append(metrics)
        collected["sample_batch_count"] += 1
        if "collected_uids" in collected and not collected["collected_uids"]:
            # an empty collection so far: start it afresh, as SkyRL's concatenation of two empty outputs
            # fails computing their metrics (np.min of no tokens; skyrl 0.3.0)
            for key in ("collected_generator_output", "collected_uids", "num_prompts_in_batch"):
                collected.pop(key)
        kept, kept_uids, more, collected = handle_dynamic_sampling(output, uids, settings, collected)
        if not more:
            return with_env_metrics(kept, kept_uids, env_metrics), kept_uids, results
        if collected["sample_batch_count"] >= ds.max_sample_batches:
            if collected.get("collected_uids"):  # filter: the groups with reward variance so far
                kept_uids = collected["collected_uids"]
                return with_env_metrics(collected["collected_generator_output"], kept_uids, env_metrics), kept_uids, results
            return output, uids, results


def with_env_metrics(output: dict[str, Any], uids: list[str], by_group: dict[str, list[Any]]) -> dict[str, Any]:
    """The output with each row's env metrics (the turns experimental.credit reads) put back after SkyRL's dynamic
    sampling, which drops them: kept groups keep their rows' order, and a replaced group repeats a kept one's."""
    seen: dict[str, int] = {}
    column = []
    for uid in uids:
        rows = by_group[uid]
        column.append(rows[seen.get(uid, 0) % len(rows)])
        seen[uid] = seen.get(uid, 0) + 1
    return {**output, "env_metrics": column}


def rollout_metrics(results: list[RolloutResult], group_size: int) -> dict[str, float]:
    """Over every rollout of the step, the ones dynamic sampling dropped included."""
    trajectories = [t for r in results for t in r.trajectories]
    rewards = np.array([t["reward"] for t in trajectories])
    groups = rewards.reshape(-1, group_size)
    variances = groups.var(axis=1)
    env = MCPToolEnv.aggregate_metrics([m or {} for r in results for m in (r.output.get("env_metrics") or [])])
    solved = np.array([t["success"] for t in trajectories], dtype=float).reshape(-1, group_size).mean(axis=1)
    return {"reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
            "success_rate": float(np.mean([t["success"] for t in trajectories])),
            "tool_success_rate": env.get("tool_success_rate", 0.0), "tool_timeout_rate": env.get("tool_timeout_rate", 0.0),
            "malformed_rate": env.get("malformed_rate", 0.0), "injected_fault_rate": env.get("injected_fault_rate", 0.0),
            "episode_len": env.get("turns", 0.0), "frac_prompts_with_signal": float((variances > 1e-8).mean()),
            "reward_var_per_prompt_mean": float(variances.mean()), "sample_batches": float(len(results)),
            "frac_all_good": float((solved == 1).mean()), "frac_all_bad": float((solved == 0).mean()),
            "frac_mixed": float(((solved > 0) & (solved < 1)).mean())}


