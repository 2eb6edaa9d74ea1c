"""The embedded trainer: base eval -> SFT warm start -> eval -> GRPO -> eval, on one machine.

Rollouts run through SkyRL's own generator over `mcp_tool_env`; advantages and policy losses come
from SkyRL's registries (see grpo.py). Everything a run produces lands in `run.output_dir`.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from loguru import logger
from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress, TaskID

from mcprl._skyrl import handle_dynamic_sampling
from mcprl.data import families, rules
from mcprl.data.sample import SkyRLSample, read_samples, write_samples
from mcprl.envs.mcp_env import MCPToolEnv
from mcprl.errors import ConfigError
from mcprl.eval.metrics import CI_KEY
from mcprl.eval.run import NATURAL
from mcprl.training import grpo
from mcprl.training.callbacks import CallbackList, build_callbacks
from mcprl.training.checkpoint import (
    TrainState,
    latest_checkpoint,
    load_checkpoint,
    read_state,
    save_checkpoint,
)
from mcprl.models.devices import release_memory, rss_gb
from mcprl.training.config import CRITIC_ESTIMATORS, AlgoConfig, LRSchedule, TrainConfig
from mcprl.training.critic import Critic, build_critic
from mcprl.training.evaluate import evaluate_in_run
from mcprl.training.guard import Guard
from mcprl.training.guidance import add_expert_demos, demo_turns
from mcprl.training.ordering import prompt_stream
from mcprl.training.policy import Policy, build_policy
from mcprl.training.reference import kl_reference
from mcprl.training.rollout import RolloutResult, episode_progress
from mcprl.training.sft import WeightAverage, batches, load_experts, sft_step, tokenize_conversation

console = Console()
Guide = Callable[[RolloutResult, list[str]], dict[str, Any]]
logger.disable("skyrl.train.utils.trainer_utils")  # dynamic sampling's banners; the step metrics say the same


# ------------------------------------------------------------------------------------------------ data

GENERATORS: dict[str, Callable[[Any], tuple[rules.RuleOutput, rules.RuleOutput]]] = {
    "rules": lambda g: rules.generate_splits(g.n_train, g.n_eval, g.seed, recovery=g.recovery),
    "families": lambda g: families.generate_splits(g.n_train, g.n_eval, g.seed, recovery=g.recovery,
                                                   no_demo_families=tuple(g.no_demo_families)),
}  # the generators that need no inputs, so a run can make its own data


def prepare_data(cfg: TrainConfig) -> tuple[list[SkyRLSample], list[SkyRLSample], Path]:
    """Train tasks, held-out eval tasks (unseen entities) and expert demos; generated when missing, and
    generated again when `data.generate` changed since mcprl generated them (a stamp beside data.train
    records it; files without a stamp are the user's and are never replaced)."""
    train_path, eval_path, experts_path = Path(cfg.data.train), Path(cfg.data.eval), Path(cfg.data.experts_path())
    g = cfg.data.generate
    stamp, wanted = train_path.with_name(f"{train_path.stem}.generate.json"), json.dumps(asdict(g), sort_keys=True)
    needs_experts = cfg.sft.enabled or cfg.experimental.expert_guidance
    missing = not (train_path.exists() and eval_path.exists() and (experts_path.exists() or not needs_experts))
    stale = stamp.exists() and stamp.read_text() != wanted
    if cfg.data.regenerate or missing or stale:
        if g.method not in GENERATORS:
            state = ("are missing" if missing else "were generated with other data.generate settings" if stale
                     else "are to be regenerated (data.regenerate)")
            raise ValueError(f"data files {state} and data.generate.method={g.method} needs inputs; "
                             f"run `mcprl data generate {g.method} ...` first")
        if stale and not missing:
            console.print(f"data.generate changed since {train_path} was generated: generating it again")
        with console.status(f"generating {g.n_train} training and {g.n_eval} held-out tasks"):
            train, held = GENERATORS[g.method](g)
        write_samples(train.samples, train_path)
        write_samples(held.samples, eval_path)
        experts_path.parent.mkdir(parents=True, exist_ok=True)
        experts_path.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in train.experts))
        stamp.write_text(wanted)
    return read_samples(train_path), read_samples(eval_path), experts_path


# ------------------------------------------------------------------------------------------ optimizer

def optimizer_for(policy: Policy, lr: float, weight_decay: float, warmup: int, total: int,
                  schedule: LRSchedule = "constant") -> tuple[torch.optim.Optimizer, Any]:
    # fused: one kernel for all parameters; a full fine-tune's step fell from 0.30 s to 0.06 s on 2 CPU cores
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=lr, weight_decay=weight_decay, fused=True)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, partial(lr_factor, warmup=warmup, total=total,
                                                               schedule=schedule))


def lr_factor(step: int, *, warmup: int, total: int, schedule: LRSchedule = "constant") -> float:
    """The learning rate at optimizer step `step` as a share of the configured one."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, total - warmup))))
    return 1.0


# ------------------------------------------------------------------------------------------------ SFT

def demo_families(experts: list[dict[str, Any]], train_tasks: list[SkyRLSample]) -> list[str]:
    """Each demo's task family; a demo of no training task shares the family "" with the others like it."""
    family_of = {t.task_id: t.family for t in train_tasks}
    return [family_of.get(e.get("task_id"), "") for e in experts]


def run_sft(policy: Policy, cfg: TrainConfig, experts_path: Path, train_tasks: list[SkyRLSample], state: TrainState,
            run_dir: Path, callbacks: CallbackList, resume_from: Path | None, clock: Clock) -> None:
    experts = load_experts(experts_path)
    examples = [tokenize_conversation(e["messages"], policy.tokenizer, cfg.sft.max_seq_len) for e in experts]
    families = demo_families(experts, train_tasks) if cfg.sft.order == "stratified" else None
    total = cfg.sft.max_steps or max(1, math.ceil(cfg.sft.epochs * len(examples) / cfg.sft.batch_size))
    opt, sched = optimizer_for(policy, cfg.sft.lr, 0.0, cfg.sft.warmup_steps, total, cfg.sft.lr_scheduler)
    generators = {"engine": policy.engine.generator}
    averaged = WeightAverage(policy.trainable_parameters(), cfg.sft.ema_decay) if cfg.sft.ema_decay else None
    if resume_from is not None:
        load_checkpoint(resume_from, policy.model, opt, sched, generators, averaged)
    stream = batches(examples, cfg.sft.batch_size, random.Random(f"{cfg.run.seed}:sft"), families)
    for _ in range(state.sft_batches_drawn):
        next(stream)
    policy.model.train()
    with Progress(console=console, transient=True) as bar:
        job = bar.add_task("SFT", total=total, completed=state.sft_step)
        while state.sft_step < total and not clock.over(cfg.sft.max_seconds):
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
            callbacks.on_step(state.sft_step, {"phase": "sft", "time_s": time.perf_counter() - t0, **metrics,
                                               "grad_norm": float(grad_norm), "lr": sched.get_last_lr()[0],
                                               "rss_gb": rss_gb()})
            bar.advance(job)
            if cfg.sft.save_every and state.sft_step % cfg.sft.save_every == 0:
                state.elapsed_s = clock.total
                callbacks.on_checkpoint(state.sft_step, save_checkpoint(run_dir, state, policy.model, policy.tokenizer,
                                                                        opt, sched, generators, averaged=averaged))
    if averaged is not None:
        averaged.apply()
    policy.engine.sync_weights()
    release_memory()


# ----------------------------------------------------------------------------------------------- GRPO

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


def guided_metrics(results: list[RolloutResult], guided: bool) -> dict[str, float]:
    """Groups that trained on an expert demo (experimental.expert_guidance), counted over every sample batch."""
    return {"guided_groups": float(sum(len(r.guided) for r in results))} if guided else {}


def write_rollouts(path: Path, results: list[RolloutResult]) -> None:
    """The step's episodes as eval trajectories, so `mcprl eval` tooling and a reader can see what GRPO
    learned from (group rewards, the calls behind them), not just their means."""
    from mcprl.eval.trajectory import as_trajectories, dump_trajectories

    path.parent.mkdir(parents=True, exist_ok=True)
    dump_trajectories(as_trajectories(t for r in results for t in [*r.trajectories, *r.guided]), path)


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
    `guide` puts expert demos into failed groups before the filter sees them (guidance.add_expert_demos).
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


def tasks_per_family(tasks: list[SkyRLSample], k: int, rng: random.Random) -> list[SkyRLSample]:
    families: dict[str, list[SkyRLSample]] = {}
    for task in tasks:
        families.setdefault(task.family, []).append(task)
    return [t for name in sorted(families) for t in rng.sample(families[name], min(k, len(families[name])))]


def greedy_successes(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], run_dir: Path,
                     name: str) -> list[bool]:
    """One greedy episode per task; the episodes go to rollouts/<name>.jsonl."""
    with episode_progress(name, len(tasks), console) as on_episode:
        result = policy.rollouts.run(tasks, 1, policy.rollouts.sampling(0.0), on_episode)
    if cfg.logging.rollouts:
        write_rollouts(run_dir / "rollouts" / f"{name}.jsonl", [result])
    return [bool(r["success"]) for r in result.trajectories]


def probe_families(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], run_dir: Path) -> dict[str, float]:
    """The warm start's greedy pass rate per task family, on `experimental.probe.per_family` seeded training tasks each.

    A family the warm start always solves gives GRPO groups without reward variance, which dynamic sampling
    then throws away; a family it fails is where the rollouts can teach something.
    """
    k = cfg.experimental.probe.per_family
    chosen = tasks_per_family(tasks, k, random.Random(f"{cfg.run.seed}:probe"))
    t0 = time.perf_counter()
    successes = greedy_successes(policy, cfg, chosen, run_dir, "grpo_probe")
    console.print(f"probe: the warm start solved {sum(successes)} of {len(chosen)} "
                  f"training tasks, {k} per family, greedy ({time.perf_counter() - t0:.0f} s)")
    solved: dict[str, list[bool]] = {}
    for task, success in zip(chosen, successes):
        solved.setdefault(task.family, []).append(success)
    return {name: sum(v) / len(v) for name, v in solved.items()}


def build_guard(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], state: TrainState,
                run_dir: Path) -> Guard | None:
    """`experimental.guard`'s probe: the same seeded training tasks, `per_family` of each family, every time."""
    config = cfg.experimental.guard
    if not config.every:
        return None
    chosen = tasks_per_family(tasks, config.per_family, random.Random(f"{cfg.run.seed}:guard"))

    def probe(step: int) -> float:
        t0 = time.perf_counter()
        successes = greedy_successes(policy, cfg, chosen, run_dir, f"grpo_guard_{step}")
        rate = sum(successes) / len(successes)
        console.print(f"guard: step {step} solved {sum(successes)} of {len(chosen)} training tasks greedily "
                      f"({rate:.1%}, {time.perf_counter() - t0:.0f} s)")
        return rate

    return Guard(config, state, probe, run_dir)


def focus_tasks(tasks: list[SkyRLSample], rates: dict[str, float], keep_below: float) -> list[SkyRLSample]:
    """The tasks of the families probed below `keep_below`; every task when no family is."""
    keep = {name for name, rate in rates.items() if rate < keep_below}
    return [t for t in tasks if t.family in keep] or tasks


def mixed_stream(focus: Iterator[SkyRLSample], whole: Iterator[SkyRLSample], share: float) -> Iterator[SkyRLSample]:
    """Prompt n from `focus` when floor((n + 1) * share) passes floor(n * share), else from `whole`: every prefix
    holds the share to within one prompt (a step of 3 at share 1/3: one focus prompt), reproducible from n."""
    n = 0
    while True:
        yield next(focus) if math.floor((n + 1) * share) > math.floor(n * share) else next(whole)
        n += 1


def without_demo(tasks: list[SkyRLSample], prompts: str, families: list[str]) -> list[SkyRLSample]:
    """The training tasks SFT had no demo of (`no_demo`), or only those of the families without demos
    (`no_demo_families`: phrasings kept from SFT in the other families left out)."""
    kept = [t for t in tasks if t.extra_info.get("demo") is False]
    if prompts == "no_demo_families":
        wanted = set(families)
        kept = [t for t in kept if t.family in wanted]
    if not kept:
        raise ConfigError(f"algo.prompts={prompts}: no training task is without an SFT demo; set "
                          "data.generate.no_demo_families or algo.prompts=all")
    return kept


def grpo_prompts(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], state: TrainState,
                 run_dir: Path) -> Iterator[SkyRLSample]:
    """GRPO's prompt stream: every task, or with `experimental.probe` the families the warm start fails (probed once,
    before the first step, and kept in the checkpoints so a resumed run draws the same prompts), mixed with
    every task at `experimental.probe.share`. Position n is reproducible from (seed, n)."""
    probe, seed, order = cfg.experimental.probe, cfg.run.seed, cfg.algo.prompt_order
    if cfg.algo.prompts != "all" and any("demo" in t.extra_info for t in tasks):
        tasks = without_demo(tasks, cfg.algo.prompts, cfg.data.generate.no_demo_families)
    if not probe.per_family:
        return prompt_stream(tasks, seed, order)
    fresh = state.probe is None or state.grpo_step == 0
    if fresh:
        state.probe = probe_families(policy, cfg, tasks, run_dir)
    pool = focus_tasks(tasks, state.probe, probe.keep_below)
    if fresh:
        failed = ", ".join(f"{name} {rate:.2g}" for name, rate in sorted(state.probe.items())
                           if rate < probe.keep_below)
        mixed = f" ({probe.share:.0%} of the prompts; the rest from every task)" if probe.share < 1 else ""
        console.print("GRPO draws from " + (f"{len(pool)} of {len(tasks)} tasks{mixed}, the families the warm start "
                                            f"solved less than {probe.keep_below:g} of: {failed}" if failed
                                            else f"every family (none below {probe.keep_below:g})"))
    focus = prompt_stream(pool, seed, order)
    return focus if probe.share == 1 else mixed_stream(focus, prompt_stream(tasks, seed, order), probe.share)


def expert_guide(policy: Policy, cfg: TrainConfig, sampling: dict[str, Any]) -> Guide:
    demos = demo_turns(load_experts(cfg.data.experts_path()))
    return partial(add_expert_demos, policy.rollouts, demos, sampling)


def run_grpo(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], state: TrainState, run_dir: Path,
             callbacks: CallbackList, resume_from: Path | None, clock: Clock) -> Critic | None:
    """GRPO (PPO with a critic under GAE) to algo.steps; returns the critic, which the final checkpoint keeps."""
    algo = cfg.algo
    opt, sched = optimizer_for(policy, algo.lr, algo.weight_decay, algo.warmup_steps, algo.steps, algo.lr_scheduler)
    generators = {"engine": policy.engine.generator}
    critic = (build_critic(cfg, next(policy.model.parameters()).device)
              if algo.advantage_estimator in CRITIC_ESTIMATORS else None)
    if resume_from is not None:
        load_checkpoint(resume_from, policy.model, opt, sched, generators)
        if critic is not None and state.grpo_step > 0:  # step_grpo_0 (the warm start) has no critic yet
            critic.load(resume_from)
    if state.grpo_step == 0:
        state.warm_start = str(Path(resume_from).resolve()) if resume_from is not None else None
    reference = kl_reference(policy.model, algo.kl_coef, state, cfg.model.name)
    config = grpo.skyrl_algorithm_config(algo, cfg.rollout.temperature)
    stream = grpo_prompts(policy, cfg, tasks, state, run_dir)
    for _ in range(state.grpo_prompts_drawn):
        next(stream)
    sampling = policy.rollouts.sampling(cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.top_k)
    guide = expert_guide(policy, cfg, sampling) if cfg.experimental.expert_guidance else None

    def save() -> Path:
        state.elapsed_s = clock.total
        return save_checkpoint(run_dir, state, policy.model, policy.tokenizer, opt, sched, generators,
                               also=critic.save if critic is not None else None)

    guard = build_guard(policy, cfg, tasks, state, run_dir)
    if guard is not None:
        guard.begin(resume_from, save)
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
                            **rollout_metrics(results, algo.group_size), **guided_metrics(results, guide is not None),
                            **metrics, "rss_gb": rss_gb()}
            if cfg.logging.rollouts:
                write_rollouts(run_dir / "rollouts" / f"grpo_step_{state.grpo_step}.jsonl", results)
            action = None
            if guard is not None and guard.due(state.grpo_step, algo.steps):
                action = guard.check(state.grpo_step, algo.steps, policy.model, opt)
                if action == "restored":
                    policy.engine.sync_weights()
                record = state.guard
                console.print(f"guard: {action} (best {record['best']:.1%} at step {record['best_step']})")
                step_metrics |= {"guard_success": record["probes"][-1][1], "guard_restored": float(action == "restored")}
            callbacks.on_step(state.grpo_step, step_metrics)
            bar.advance(job)
            if action == "best" or (algo.save_every and state.grpo_step % algo.save_every == 0):
                callbacks.on_checkpoint(state.grpo_step, save())
    return critic


# ------------------------------------------------------------------------------------------ the run

class Clock:
    """Training seconds (evals excluded), carried across resumes."""

    def __init__(self, elapsed: float = 0.0) -> None:
        self.before, self.start = elapsed, time.perf_counter()
        self.paused = 0.0

    @property
    def total(self) -> float:
        return self.before + time.perf_counter() - self.start - self.paused

    def over(self, limit: float | None) -> bool:
        return limit is not None and self.total >= limit


@dataclass
class RunStart:
    """What every engine's run begins with: its directory, data, and the checkpoint it continues."""

    run_dir: Path
    train_tasks: list[SkyRLSample]
    eval_tasks: list[SkyRLSample]
    experts_path: Path
    natural_tasks: list[SkyRLSample]
    checkpoint: Path | None
    state: TrainState


def start_run(cfg: TrainConfig, resume: bool, resume_from: Path | None) -> RunStart:
    """Seeds, the state to continue from, and data (generated when missing): the state is read before the
    data is made and any model loads, so that a broken checkpoint fails at once."""
    run_dir = Path(cfg.run.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    random.seed(cfg.run.seed)
    np.random.seed(cfg.run.seed)
    torch.manual_seed(cfg.run.seed)
    checkpoint = resume_from or (latest_checkpoint(run_dir) if resume else None)
    state = read_state(checkpoint) if checkpoint is not None else TrainState(phase="sft" if cfg.sft.enabled else "grpo")
    train_tasks, eval_tasks, experts_path = prepare_data(cfg)
    return RunStart(run_dir, train_tasks, eval_tasks, experts_path, natural_eval_tasks(cfg), checkpoint, state)


def open_run(cfg: TrainConfig, start: RunStart, where: str = "") -> tuple[CallbackList, Clock]:
    """The run's callbacks started and its clock carried on; a resumed run says so and brings the evals of
    the run its checkpoint came from."""
    if start.checkpoint is not None:
        console.print(f"resuming from {start.checkpoint} ({start.state.phase} step {start.state.tag}){where}")
        adopt_evals(start.checkpoint, start.run_dir, start.state)
    callbacks = build_callbacks(cfg, start.run_dir)
    callbacks.on_train_start(cfg, start.run_dir)
    return callbacks, Clock(start.state.elapsed_s)


def train(cfg: TrainConfig, *, resume: bool = False, resume_from: Path | None = None,
          sft_only: bool = False) -> dict[str, Any]:
    start = start_run(cfg, resume, resume_from)
    run_dir, train_tasks, eval_tasks, experts_path = start.run_dir, start.train_tasks, start.eval_tasks, start.experts_path
    natural_tasks, checkpoint, state = start.natural_tasks, start.checkpoint, start.state
    policy = build_policy(cfg)
    if cfg.model.dtype == "auto" and not policy.bf16 and next(policy.model.parameters()).device.type == "cpu":
        console.print("[yellow]fp32: this CPU has neither AMX nor AVX512-BF16, so steps take about twice as long as "
                      "in bf16 (docs/results.md gives the time per kind of machine)[/yellow]")
    callbacks, clock = open_run(cfg, start)
    summary: dict[str, Any] = {}
    try:
        if cfg.eval.before and "base" not in state.evals:
            _evals(policy, cfg, eval_tasks, natural_tasks, run_dir, "base", state, callbacks, clock)
        if state.phase == "sft":
            run_sft(policy, cfg, experts_path, train_tasks, state, run_dir, callbacks, checkpoint, clock)
            state.phase, state.sft_seconds = "grpo", round(clock.total, 1)
            if cfg.eval.after_sft:
                _evals(policy, cfg, eval_tasks, natural_tasks, run_dir, "sft", state, callbacks, clock)
            state.elapsed_s = clock.total
            # Phase boundary (step_grpo_0): the warm-started weights, no optimizer state (GRPO starts its
            # own). An --sft-only run ends here, so `--resume` or `--resume-from` later runs its GRPO.
            checkpoint = save_checkpoint(run_dir, state, policy.model, policy.tokenizer, None, None,
                                         {"engine": policy.engine.generator})
        final = checkpoint
        if state.phase == "grpo" and not sft_only:
            critic = run_grpo(policy, cfg, train_tasks, state, run_dir, callbacks, checkpoint, clock)
            state.phase = "done"
            if cfg.eval.after_grpo:
                _evals(policy, cfg, eval_tasks, natural_tasks, run_dir, "grpo", state, callbacks, clock)
            state.elapsed_s = clock.total
            final = save_checkpoint(run_dir, state, policy.model, policy.tokenizer, None, None,
                                    {"engine": policy.engine.generator},
                                    also=critic.save if critic is not None else None)
        summary = summarize(cfg, run_dir, state, clock, final)
    except BaseException:
        with contextlib.suppress(Exception):  # the run's own error is the one to report (a full disk fails both)
            callbacks.on_train_end(summary)
        raise
    else:
        callbacks.on_train_end(summary)
    finally:
        policy.engine.close()
    _report(run_dir)
    return summary


def summarize(cfg: TrainConfig, run_dir: Path, state: TrainState, clock: Clock, final: Path | None) -> dict[str, Any]:
    """summary.json: every eval, the paired tests between them (generated, natural, no-demo families), time, steps."""
    generated = {k: v for k, v in state.evals.items() if not k.startswith(NATURAL)}
    natural = {k.removeprefix(NATURAL): v for k, v in state.evals.items() if k.startswith(NATURAL)}
    generated_results = _load_evals(run_dir, generated)
    without_demos = _without_demos(generated_results, cfg.data.generate.no_demo_families)
    return {**{f"eval_{k}": v for k, v in generated.items()}, "paired": _paired(generated_results),
            **({"no_demo_families": without_demos} if without_demos else {}),
            **({"eval_natural": natural, "paired_natural": _paired(_load_evals(run_dir, natural, NATURAL))}
               if natural else {}),
            "train_seconds": round(clock.total, 1), "sft_steps": state.sft_step, "sft_seconds": state.sft_seconds,
            "grpo_steps": state.grpo_step, "final_checkpoint": str(final) if final else None,
            **({"grpo_probe": state.probe} if state.probe is not None else {}),
            **({"grpo_guard": state.guard} if state.guard is not None else {})}

def natural_eval_tasks(cfg: TrainConfig) -> list[SkyRLSample]:
    """The tasks written in people's words (eval.natural), or none, said once, where the file is missing."""
    tasks = read_samples(Path(cfg.eval.natural)) if cfg.eval.natural and Path(cfg.eval.natural).is_file() else []
    if cfg.eval.natural and not tasks:
        console.print(f"[yellow]eval.natural: {cfg.eval.natural} not found here; the natural held-out eval is skipped[/yellow]")
    return tasks


def adopt_evals(checkpoint: Path, run_dir: Path, state: TrainState) -> None:
    """A checkpoint from another run brings that run's evals (eval_base/, eval_sft/) into this one, so the
    report and the paired tests still compare base -> sft -> grpo on the same tasks."""
    source = Path(checkpoint).resolve().parent.parent
    if source == run_dir.resolve():
        return
    for name in list(state.evals):
        src, dst = source / f"eval_{name}", run_dir / f"eval_{name}"
        if src.is_dir():
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
        else:
            console.print(f"[yellow]{src} is gone: eval_{name} left out of this run's summary[/yellow]")
            del state.evals[name]


def _evals(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], natural: list[SkyRLSample], run_dir: Path,
           name: str, state: TrainState, callbacks: CallbackList, clock: Clock) -> None:
    state.evals[name] = _eval(policy, cfg, tasks, run_dir, name, callbacks, clock)
    if natural:
        state.evals[NATURAL + name] = _eval(policy, cfg, natural, run_dir, name, callbacks, clock, NATURAL)


def _eval(policy: Policy, cfg: TrainConfig, tasks: list[SkyRLSample], run_dir: Path, name: str,
          callbacks: CallbackList, clock: Clock, prefix: str = "") -> dict[str, Any]:
    t0 = time.perf_counter()
    results = evaluate_in_run(policy, cfg, tasks, run_dir, name, prefix, console)
    seconds = time.perf_counter() - t0
    clock.paused += seconds
    callbacks.on_eval(prefix + name, results)
    overall = results["overall"]
    return {"success_rate": overall.get("success_rate"), "pass@1": overall.get("pass@1"),
            CI_KEY: overall.get(CI_KEY),
            "by_complexity": {k: v.get("success_rate") for k, v in results.get("by_complexity", {}).items()},
            "by_family": {k: v.get("success_rate") for k, v in results.get("by_family", {}).items()},
            "by_style": {k: v.get("success_rate") for k, v in results.get("by_style", {}).items()},
            **{key: overall.get(key) for key in ("tool_error_rate", "mean_turns", "false_completion_rate",
                                                 "failed_call_rate", "recovery_rate", "answer_after_error_rate")},
            "seconds": round(seconds, 1)}


def _load_evals(run_dir: Path, evals: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    from mcprl.eval.results import load_results

    return {name: load_results(run_dir / f"eval_{prefix}{name}") for name in evals}


def _paired(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """base -> sft -> grpo on the same held-out tasks: which tasks changed, and whether that is chance."""
    from mcprl.eval.compare import paired_evals

    return {key: test.to_dict() for key, test in paired_evals(results).items()}


def _without_demos(results: dict[str, dict[str, Any]], families: list[str]) -> dict[str, Any]:
    """The held-out tasks of the families SFT had no demo of: pass@1 at each eval, and each eval against
    the one before it on those tasks alone (where GRPO must do what SFT could not)."""
    from mcprl.eval.stats import paired

    if not families or not results:
        return {}
    subsets = {name: {t: v for t, v in r["per_task"].items() if r.get("task_family", {}).get(t) in families}
               for name, r in results.items()}
    if not any(subsets.values()):
        return {}
    names = list(subsets)
    tests = {f"{b}_vs_{a}": paired(subsets[a], subsets[b], results[b].get("task_family"))
             for a, b in zip(names, names[1:])}
    return {"families": list(families), "n_tasks": max(len(v) for v in subsets.values()),
            "pass@1": {n: (sum(v.values()) / len(v) if v else None) for n, v in subsets.items()},
            "paired": {k: t.to_dict() for k, t in tests.items() if t is not None}}


def _report(run_dir: Path) -> None:
    from mcprl.eval.report import build_report

    try:
        build_report(run_dir, console=console)  # prints the report's path
    except Exception as e:  # noqa: BLE001 - the run's results are already on disk
        console.print(f"[yellow]report skipped:[/yellow] {e}")
