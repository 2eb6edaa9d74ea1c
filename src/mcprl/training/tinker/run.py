"""`mcprl train --engine tinker`: the embedded trainer's run (data, evals, SFT then GRPO, checkpoints,
summary, report) with the model on a Tinker server, local (SkyRL's, started for the run) or remote.

Rollouts are SkyRL's own generator over `mcp_tool_env` with a Tinker sampler as its inference engine
(mcprl.inference.tinker_engine), so the tokens trained are the tokens sampled. Each step sends one
`forward_backward` and one `optim_step` (both submitted before either is awaited), then syncs the
sampler (`save_weights_and_get_sampling_client`). A checkpoint records the server's state path (what
`--resume` continues from, optimizer included) and holds the weights exported as a PEFT adapter in
`model/`, so `mcprl eval -m CHECKPOINT` and the report treat it as any embedded checkpoint.

Differences from the embedded engine, by the API's design: LoRA only (finetune.mode is ignored, with a
line); GRPO continues SFT's optimizer moments (SkyRL's server restores Adam's state with the weights);
no KL term, no second epoch, no experimental knobs (refused at load time).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import tarfile
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import torch
from rich.progress import Progress
from transformers import AutoConfig, PreTrainedTokenizerBase

from mcprl.errors import ConfigError
from mcprl.inference.tinker_engine import Alive, TinkerSamplingEngine, result
from mcprl.models.devices import rss_gb
from mcprl.models.loading import load_tokenizer, resolve_model
from mcprl.training import grpo
from mcprl.training.checkpoint import (
    STATE_FILE,
    WARM_START,
    TrainState,
    rng_state,
    set_rng_state,
    write_checkpoint,
)
from mcprl.training.config import TrainConfig
from mcprl.training.policy import adapter_modules, build_policy, load_policy_weights, rollouts_for
from mcprl.training.rollout import Rollouts, write_rollouts
from mcprl.training.sft import batches, load_experts, tokenize_conversation
from mcprl.training.tinker.datums import Reduction, datum_rows, ignored, loss_for, refusal, sft_row, to_datum
from mcprl.training.tinker.server import LocalTinkerServer
from mcprl.training.loop.evals import report, run_evals, summarize
from mcprl.training.loop.grpo import grpo_progress, rollout_metrics, sample_step_batch
from mcprl.training.loop.prompts import grpo_prompts
from mcprl.training.loop.sft import demo_families
from mcprl.training.optim import lr_factor
from mcprl.training.run import Run, console, open_run, start_run

LOCAL = "local"
LOCAL_KEY = "tml-local"  # SkyRL's server takes any non-empty key


@dataclass
class TinkerPolicy:
    """What the shared rollout and eval code uses of a policy: the tokenizer, the engine, the episodes."""

    tokenizer: PreTrainedTokenizerBase
    engine: TinkerSamplingEngine
    rollouts: Rollouts


@dataclass
class Session:
    cfg: TrainConfig
    service: Any  # tinker.ServiceClient
    training: Any  # tinker.TrainingClient
    policy: TinkerPolicy
    reduction: Reduction
    run_dir: Path
    url: str  # the server's
    alive: Alive | None  # a server this run started: is it still up

    def adam(self, lr: float, weight_decay: float) -> Any:
        from tinker import types

        # torch's AdamW defaults, as the embedded trainer's optimizer has them
        return types.AdamParams(learning_rate=lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=weight_decay,
                                grad_clip_norm=self.cfg.algo.grad_clip)

    def step(self, datums: list[Any], loss: str, loss_config: dict[str, float] | None, lr: float,
             weight_decay: float) -> Any:
        """forward_backward and optim_step submitted together (the server queues both), then awaited."""
        backward = self.training.forward_backward(datums, loss, loss_config)
        update = self.training.optim_step(self.adam(lr, weight_decay))
        out = result(backward, self.alive)
        result(update, self.alive)
        return out

    def sync(self) -> float:
        t0 = time.perf_counter()
        self.policy.engine.follow(self.training.save_weights_and_get_sampling_client())
        return time.perf_counter() - t0

    def save(self, run: Run) -> Path:
        """The server's state (resume) and sampler weights (exported into model/), then the checkpoint."""
        state = run.state
        name = f"{state.tag}-{uuid.uuid4().hex[:8]}"
        state_path = result(self.training.save_state(name), self.alive).path
        sampler_path = result(self.training.save_weights_for_sampler(name), self.alive).path
        state.tinker = {"state_path": state_path, "sampler_path": sampler_path,
                        "base_url": self.cfg.tinker.base_url if self.cfg.tinker.base_url != LOCAL else LOCAL}
        state.elapsed_s = run.clock.total

        def write(tmp: Path) -> None:
            archive = sampler_archive(self.service, sampler_path, self.url)
            export_adapter(archive, tmp / "model", base_model=self.cfg.model.name)
            self.policy.tokenizer.save_pretrained(tmp / "model")
            torch.save({"optimizer": None, "scheduler": None, "rng": rng_state({"engine": self.policy.engine.generator}),
                        "averaged": None}, tmp / "training.pt")

        return write_checkpoint(self.run_dir, state, write)


def export_adapter(archive: bytes, out: Path, *, base_model: str) -> None:
    """The server's sampler weights (a PEFT LoRA archive) into `out`, naming `base_model` as its base so
    that mcprl loads it on this machine."""
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        tar.extractall(out, filter="data")
    config = out / "adapter_config.json"
    if not config.is_file():
        raise ConfigError("the Tinker sampler archive holds no adapter_config.json")
    adapter = json.loads(config.read_text())
    adapter["base_model_name_or_path"] = base_model
    # SkyRL's server (0.3.0) writes no target_modules, and PEFT then adapts its default for the architecture
    # (a llama's q_proj and v_proj) and drops every other tensor of the file: name what the file holds.
    adapter["target_modules"] = adapter_modules(out / "adapter_model.safetensors")
    config.write_text(json.dumps(adapter, indent=1))


def sampler_archive(service: Any, sampler_path: str, base_url: str) -> bytes:
    """The sampler weights' archive: through the signed URL the API gives (hosted Tinker; the URL gets no
    API key), or where SkyRL's server (0.3.0) serves it, whose route does not take the SDK's checkpoint ids."""
    import tinker

    path = sampler_tinker_path(sampler_path)
    run, _, name = path.removeprefix("tinker://").partition("/sampler_weights/")
    try:
        url = service.create_rest_client().get_checkpoint_archive_url_from_tinker_path(path).result().url
    except tinker.NotFoundError:
        url = f"{base_url.rstrip('/')}/api/v1/training_runs/{run}/checkpoints/{name}/download"
    response = httpx.get(url, follow_redirects=True, timeout=600.0)
    response.raise_for_status()
    return response.content


def close_service(service: Any) -> None:
    """Stop the SDK's session heartbeat (tinker 0.24.1's ServiceClient has no close of its own), which
    would otherwise report a stopped server as "Tinker is down" for as long as the process lives."""
    for holder in (getattr(service, "_session_holder", None), getattr(service, "_rest_holder", None)):
        if holder is not None:
            with contextlib.suppress(Exception):
                holder.close()


def eval_here(cfg: TrainConfig) -> bool:
    """tinker.evals: local evaluates the exported adapters on this machine (auto: with a local server,
    whose JAX sampler is several times slower than the embedded engine on a CPU)."""
    return cfg.tinker.evals == "local" or (cfg.tinker.evals == "auto" and cfg.tinker.base_url == LOCAL)


def record_state(checkpoint: Path, state: TrainState) -> None:
    """The checkpoint's state file again, with the evals run from it."""
    file = Path(checkpoint) / STATE_FILE
    tmp = file.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=1))
    os.replace(tmp, file)


def sampler_tinker_path(path: str) -> str:
    """`tinker://RUN/sampler_weights/NAME`, the form the SDK parses; SkyRL's server answers `tinker://RUN/NAME`."""
    run, _, rest = path.removeprefix("tinker://").partition("/")
    return path if rest.startswith("sampler_weights/") else f"tinker://{run}/sampler_weights/{rest}"


def context_length(model_dir: Path, tokenizer: PreTrainedTokenizerBase) -> int:
    limit = getattr(AutoConfig.from_pretrained(model_dir, local_files_only=True), "max_position_embeddings", None)
    return min(int(limit or tokenizer.model_max_length), int(tokenizer.model_max_length))


def server_reduction(cfg: TrainConfig) -> Reduction:
    if cfg.tinker.server_reduction != "auto":
        return cfg.tinker.server_reduction
    return "sequence_mean" if cfg.tinker.base_url == LOCAL else "sum"


def api_key(cfg: TrainConfig) -> str:
    key = os.environ.get(cfg.tinker.api_key_env, "")
    if cfg.tinker.base_url == LOCAL:
        return key or LOCAL_KEY
    if not key:
        raise ConfigError(f"tinker.base_url={cfg.tinker.base_url}: set the API key in ${cfg.tinker.api_key_env} "
                          "(tinker.api_key_env names the variable)")
    return key


def local_server(cfg: TrainConfig, run_dir: Path) -> LocalTinkerServer:
    backend = {"max_lora_rank": lora_rank(cfg), **cfg.tinker.backend_config}
    return LocalTinkerServer(base_model(cfg), run_dir / "tinker", backend_config=backend,
                             startup_timeout_s=cfg.tinker.startup_timeout_s)


def base_model(cfg: TrainConfig) -> str:
    """The server's model name: tinker.model, or for a local server model.name's local directory."""
    if cfg.tinker.model:
        return cfg.tinker.model
    if cfg.tinker.base_url == LOCAL:
        return str(resolve_model(cfg.model.name))
    raise ConfigError("tinker.model: name the remote server's base model (its id, e.g. meta-llama/Llama-3.2-1B); "
                      "model.name still gives the local tokenizer")


def lr_scale(cfg: TrainConfig) -> float:
    """The config's learning rates are a full fine-tune's when finetune.mode is full; a LoRA wants more."""
    return cfg.tinker.lr_multiplier if cfg.finetune.mode == "full" else 1.0


def lora_rank(cfg: TrainConfig) -> int:
    return cfg.tinker.lora_rank or cfg.finetune.lora.r


def check(cfg: TrainConfig) -> None:
    why = refusal(cfg)
    if why:
        raise ConfigError(why)
    if cfg.tinker.base_url != LOCAL:
        api_key(cfg)
        base_model(cfg)


def connect(cfg: TrainConfig, url: str, state: TrainState, checkpoint: Path | None) -> tuple[Any, Any]:
    """The service client and a training client: fresh, or from the checkpoint's server state (weights and
    Adam moments: `--resume` continues the step it saved)."""
    import tinker

    service = tinker.ServiceClient(base_url=url, api_key=api_key(cfg))
    saved = (state.tinker or {}).get("state_path") if checkpoint is not None else None
    if checkpoint is not None and not saved:
        raise ConfigError(f"{checkpoint} is not a Tinker checkpoint (no server state in it); resume it with "
                          "--engine embedded")
    if saved:
        return service, service.create_training_client_from_state_with_optimizer(saved)
    return service, service.create_lora_training_client(base_model=base_model(cfg), rank=lora_rank(cfg),
                                                         seed=cfg.run.seed)


# ------------------------------------------------------------------------------------------------ SFT

def run_sft(session: Session, run: Run) -> None:
    """The demos' assistant tokens as cross_entropy datums: the embedded SFT's batches, order and schedule."""
    cfg, tokenizer, state = session.cfg, session.policy.tokenizer, run.state
    experts = load_experts(run.experts_path)
    examples = [tokenize_conversation(e["messages"], tokenizer, cfg.sft.max_seq_len) for e in experts]
    families = demo_families(experts, run.train_tasks) if cfg.sft.order == "stratified" else None
    total = cfg.sft.max_steps or max(1, math.ceil(cfg.sft.epochs * len(examples) / cfg.sft.batch_size))
    stream = batches(examples, cfg.sft.batch_size, random.Random(f"{cfg.run.seed}:sft"), families)
    for _ in range(state.sft_batches_drawn):
        next(stream)
    with Progress(console=console, transient=True) as bar:
        job = bar.add_task("SFT (tinker)", total=total, completed=state.sft_step)
        while state.sft_step < total and not run.clock.over(cfg.sft.max_seconds):
            t0 = time.perf_counter()
            batch = next(stream)
            state.sft_batches_drawn += 1
            tokens = sum(sum(e.loss_mask[1:]) for e in batch)
            rows = [sft_row(e.input_ids, e.loss_mask, server=session.reduction, batch_tokens=tokens) for e in batch]
            lr = lr_scale(cfg) * cfg.sft.lr * lr_factor(state.sft_step, warmup=cfg.sft.warmup_steps, total=total,
                                        schedule=cfg.sft.lr_scheduler)
            out = session.step([to_datum(r, "cross_entropy") for r in rows], "cross_entropy", None, lr, 0.0)
            nll = -sum(sum(lp for lp, w in zip(o["logprobs"].tolist(), e.loss_mask[1:]) if w)
                       for o, e in zip(out.loss_fn_outputs, batch)) / max(1, tokens)
            state.sft_step += 1
            run.callbacks.on_step(state.sft_step, {"phase": "sft", "time_s": time.perf_counter() - t0, "sft_loss": nll,
                                               "sft_ppl": math.exp(min(nll, 50.0)), "sft_tokens": float(tokens),
                                               "lr": lr, "rss_gb": rss_gb()})
            bar.advance(job)
            if cfg.sft.save_every and state.sft_step % cfg.sft.save_every == 0:
                run.callbacks.on_checkpoint(state.sft_step, session.save(run))
    session.sync()


# ----------------------------------------------------------------------------------------------- GRPO

def server_loss(out: Any, rows: list[Any], loss: str, loss_config: dict[str, float] | None,
                reduction: Reduction) -> float:
    """The loss the server minimised, from its learner logprobs (SkyRL's server returns no loss metric):
    Tinker's per-token formulas, summed (hosted) or each sequence's mean averaged (SkyRL's server)."""
    lo, hi = ((loss_config or {}).get("clip_low_threshold", 0.0), (loss_config or {}).get("clip_high_threshold", math.inf))
    per_row = []
    for o, r in zip(out.loss_fn_outputs, rows):
        lp = torch.tensor(o["logprobs"].tolist(), dtype=torch.float64)
        old, adv, w = (torch.tensor(x, dtype=torch.float64) for x in (r.logprobs, r.advantages, r.weights))
        ratio = torch.exp(lp - old)
        if loss == "ppo":
            tokens = -torch.minimum(ratio * adv, ratio.clamp(lo, hi) * adv)
        elif loss == "cispo":
            tokens = -(ratio.clamp(lo, hi) * lp * adv)
        else:
            tokens = -(ratio * adv)
        total = float((tokens * w).sum())
        per_row.append(total / max(float(w.sum()), 1.0) if reduction == "sequence_mean" else total)
    return float(np.mean(per_row)) if reduction == "sequence_mean" else float(np.sum(per_row))


def learner_gap(out: Any, rows: list[Any]) -> dict[str, float]:
    """Sampler vs learner logprobs on the trained tokens: the mean gap (`kl_sample_train`, k1) and the
    largest. Near zero when the tokens trained are the tokens sampled; the alignment alarm."""
    gaps = [s - float(lp) for o, r in zip(out.loss_fn_outputs, rows)
            for s, lp, w in zip(r.logprobs, o["logprobs"].tolist(), r.weights) if w > 0]
    if not gaps:
        return {}
    return {"tinker/kl_sample_train": float(np.mean(gaps)), "tinker/max_abs_logprob_gap": float(np.max(np.abs(gaps)))}


def run_grpo(session: Session, run: Run) -> None:
    cfg, policy, state = session.cfg, session.policy, run.state
    algo = cfg.algo
    config = grpo.skyrl_algorithm_config(algo, cfg.rollout.temperature)
    loss, loss_config = loss_for(algo)
    stream = grpo_prompts(run)  # no hooks: the experimental knobs are refused at load time
    sampling = policy.rollouts.sampling(cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.top_k)
    max_len = cfg.tinker.max_sequence_length or cfg.rollout.max_input_length + cfg.rollout.max_new_tokens
    with grpo_progress("GRPO (tinker)", algo.steps, state.grpo_step) as (bar, job, episodes):
        while state.grpo_step < algo.steps:
            t0 = time.perf_counter()
            policy.engine.reset_stats()
            bar.reset(episodes)
            output, uids, results = sample_step_batch(policy, algo, stream, state, sampling,  # type: ignore[arg-type]
                                                      (bar, episodes))
            t_sample = time.perf_counter() - t0
            batch = grpo.build_batch(output, uids)
            adv, _ = grpo.advantages(batch, config)
            rows, truncated = datum_rows(batch, adv, loss_reduction=algo.loss_reduction, server=session.reduction,
                                         max_len=max_len)
            lr = lr_scale(cfg) * algo.lr * lr_factor(state.grpo_step, warmup=algo.warmup_steps, total=algo.steps,
                                     schedule=algo.lr_scheduler)
            t1 = time.perf_counter()
            update: dict[str, float] = {"rows": float(batch.size), "active_rows": float(len(rows)), "lr": lr,
                                        "trained_tokens": float(sum(r.trained_tokens for r in rows)),
                                        "adv_abs_mean": float(adv.abs().sum() / batch.loss_mask.sum().clamp(min=1))}
            if rows:  # a step without signal takes no optimizer step, as the embedded one takes a zero one
                out = session.step([to_datum(r, loss) for r in rows], loss, loss_config, lr, algo.weight_decay)
                update |= {"policy_loss": server_loss(out, rows, loss, loss_config, session.reduction),
                           **learner_gap(out, rows)}
            t_train = time.perf_counter() - t1
            t_sync = session.sync() if rows else 0.0
            state.grpo_step += 1
            rollout = rollout_metrics(results, algo.group_size)
            step_metrics = {"phase": "grpo", "time_s": time.perf_counter() - t0, "rollout_s": t_sample,
                            "rollout_tok_s": policy.engine.stats.tokens_per_second, **rollout, **update,
                            f"rollout/pass_at_{algo.group_size}": 1.0 - rollout["frac_all_bad"],
                            "time/sample_s": t_sample, "time/train_s": t_train, "time/sync_s": t_sync,
                            "tinker/truncated": float(truncated), "rss_gb": rss_gb()}
            if cfg.logging.rollouts:
                write_rollouts(session.run_dir / "rollouts" / f"grpo_step_{state.grpo_step}.jsonl", results)
            run.callbacks.on_step(state.grpo_step, step_metrics)
            bar.advance(job)
            if algo.save_every and state.grpo_step % algo.save_every == 0:
                run.callbacks.on_checkpoint(state.grpo_step, session.save(run))


# ------------------------------------------------------------------------------------------ the run

def train(cfg: TrainConfig, *, resume: bool = False, resume_from: Path | None = None,
          sft_only: bool = False) -> dict[str, Any]:
    check(cfg)
    for note in ignored(cfg):
        console.print(f"[yellow]engine tinker: {note}[/yellow]")
    start = start_run(cfg, resume, resume_from)
    checkpoint, state = start.checkpoint, start.state
    tokenizer = load_tokenizer(cfg.model.name)
    server = local_server(cfg, start.dir) if cfg.tinker.base_url == LOCAL else None
    with server if server is not None else contextlib.nullcontext():
        url = server.url if server is not None else cfg.tinker.base_url
        with console.status(f"connecting to the Tinker server at {url} (a local one loads the model first)"):
            service, training = connect(cfg, url, state, checkpoint)
            engine = TinkerSamplingEngine(training.save_weights_and_get_sampling_client(), tokenizer,
                                          context=context_length(resolve_model(cfg.model.name), tokenizer),
                                          seed=cfg.run.seed, max_batch_size=max(cfg.num_envs, cfg.eval.max_tasks or 0, 1),
                                          max_wait_ms=cfg.rollout.batch_max_wait_ms,
                                          alive=server.alive if server is not None else None)
        policy = TinkerPolicy(tokenizer, engine, rollouts_for(cfg, engine, tokenizer))
        alive = server.alive if server is not None else None
        session = Session(cfg, service, training, policy, server_reduction(cfg), start.dir, url, alive)
        if checkpoint is not None:
            set_rng_state(torch.load(Path(checkpoint) / "training.pt", weights_only=False)["rng"],
                          {"engine": engine.generator})
        run = open_run(start, policy, " on the Tinker server")  # type: ignore[arg-type]
        summary: dict[str, Any] = {}
        local = eval_here(cfg)

        def evaluate(name: str, weights: Path | None, latest: Path | None) -> None:
            """On the Tinker sampler, or (tinker.evals local) on this machine's engine from the `weights`
            checkpoint's exported adapter, the base model without one: the code `mcprl eval -m CHECKPOINT`
            runs. The evals done are recorded in the `latest` checkpoint's state."""
            if not local:
                run_evals(run, name)
                return
            model, tok = load_policy_weights(str(weights) if weights is not None else cfg.model.name)
            here = build_policy(cfg, model=model, tokenizer=tok)
            try:
                run_evals(replace(run, policy=here), name)
            finally:
                here.engine.close()
            if latest is not None:
                record_state(latest, state)

        try:
            if cfg.eval.before and "base" not in state.evals:
                evaluate("base", None, checkpoint)
            final = checkpoint
            warm = start.dir / "checkpoints" / WARM_START
            if state.phase == "sft":
                run_sft(session, run)
                state.phase, state.sft_seconds = "grpo", round(run.clock.total, 1)
                if cfg.eval.after_sft and not local:
                    evaluate("sft", None, None)
                final = session.save(run)  # step_grpo_0: the warm start
            if cfg.eval.after_sft and local and "sft" not in state.evals and warm.is_dir():
                evaluate("sft", warm, final)  # also after a resume whose run stopped before this eval ended
            if state.phase == "grpo" and not sft_only:
                run_grpo(session, run)
                state.phase = "done"
                if cfg.eval.after_grpo and not local:
                    evaluate("grpo", None, None)
                final = session.save(run)
            if state.phase == "done" and cfg.eval.after_grpo and local and "grpo" not in state.evals:
                evaluate("grpo", final, final)
            summary = {**summarize(run, final), "engine": "tinker",
                       "tinker": {"base_url": state.tinker["base_url"] if state.tinker else cfg.tinker.base_url,
                                  "lora_rank": lora_rank(cfg), "server_reduction": session.reduction}}
        except BaseException:
            with contextlib.suppress(Exception):
                run.callbacks.on_train_end(summary)
            raise
        else:
            run.callbacks.on_train_end(summary)
        finally:
            engine.close()
            close_service(service)
    report(start.dir)
    return summary
