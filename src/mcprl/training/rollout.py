"""Episodes through SkyRL's own `SkyRLGymGenerator` over each row's env (`mcp_tool_env`, `openenv_env`), for
training and evaluation.

One place turns tasks into a `GeneratorInput` (group_size samples per task), runs SkyRL's loop with
our in-process engine (HF or vLLM), and turns its output back into per-trajectory records (the eval format).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from copy import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcprl.envs  # noqa: F401 - registers mcp_tool_env and openenv_env
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import PreTrainedTokenizerBase

from mcprl._skyrl import TrajectoryID
from mcprl.data.sample import SkyRLSample
from mcprl.inference.engine import BatchingEngine
from mcprl.protocol.parsing import stop_strings
from mcprl.training.generator import make_generator

ENV_WORKERS = 8  # env steps are tool calls: I/O-bound, fine to overlap


@dataclass
class RolloutResult:
    samples: list[SkyRLSample]  # one per trajectory
    group_ids: list[str]  # the task each trajectory belongs to (GRPO groups)
    output: dict[str, Any]  # SkyRL GeneratorOutput
    trajectories: list[dict[str, Any]]  # eval-format records (docs/evaluation.md)
    guided: list[dict[str, Any]] = field(default_factory=list)  # demos put in failed groups (experimental/guidance.py)


class Rollouts:
    def __init__(self, engine: BatchingEngine, tokenizer: PreTrainedTokenizerBase, *, env_config: dict[str, Any],
                 max_turns: int, max_input_length: int, max_new_tokens: int, overlong_filter: bool = False,
                 openenv_config: dict[str, Any] | None = None) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.env_config = env_config
        self.openenv_config = openenv_config or {}
        self.max_turns = max_turns
        self.max_input_length = max_input_length
        self.max_new_tokens = max_new_tokens
        self.overlong_filter = overlong_filter

    def sampling(self, temperature: float, top_p: float = 1.0, top_k: int = -1) -> dict[str, Any]:
        return {"max_generate_length": self.max_new_tokens, "temperature": temperature, "top_p": top_p,
                "top_k": top_k, "logprobs": 0, "stop": stop_strings("hermes")}

    def replaying(self, engine: Any) -> Rollouts:
        """The same episodes' settings over another inference client (experimental/guidance.py replays demos)."""
        other = copy(self)
        other.engine = engine
        return other

    def run(self, tasks: list[SkyRLSample], n_per_task: int, sampling: dict[str, Any],
            on_episode: Callable[[], None] | None = None) -> RolloutResult:
        """`on_episode` is called as each episode ends (a progress bar: episodes end in any order)."""
        generator = make_generator(self.engine, self.tokenizer, max_turns=self.max_turns,
                                   max_input_length=self.max_input_length, sampling=sampling,
                                   max_env_workers=ENV_WORKERS, env_config=self.env_config,
                                   openenv_config=self.openenv_config, on_episode=on_episode,
                                   apply_overlong_filtering=self.overlong_filter)
        samples = [t for t in tasks for _ in range(n_per_task)]
        batch = {
            "prompts": [list(s.prompt) for s in samples],
            "env_classes": [s.env_class for s in samples],
            "env_extras": [{"reward_spec": s.reward_spec, "extra_info": s.extra_info, "data_source": s.data_source}
                           for s in samples],
            "sampling_params": None,
            "trajectory_ids": [TrajectoryID(instance_id=s.task_id, repetition_id=i % n_per_task)
                               for i, s in enumerate(samples)],
            "batch_metadata": None,
        }
        self.engine.expect(len(samples))
        output = asyncio.run(generator.generate(batch, disable_tqdm=True))
        group_ids = [s.task_id for s in samples]
        records = [trajectory_record(s, i % n_per_task, output, i, self.tokenizer, self.max_input_length)
                   for i, s in enumerate(samples)]
        return RolloutResult(samples, group_ids, output, records)


def write_rollouts(path: Path, results: list[RolloutResult]) -> None:
    """Episodes as eval trajectories (a GRPO step's, a greedy probe's), so `mcprl eval` tooling and a reader can
    see what GRPO learned from (group rewards, the calls behind them), not just their means."""
    from mcprl.eval.trajectory import as_trajectories, dump_trajectories

    path.parent.mkdir(parents=True, exist_ok=True)
    dump_trajectories(as_trajectories(t for r in results for t in [*r.trajectories, *r.guided]), path)


@contextmanager
def episode_progress(label: str, total: int, console: Console | None = None) -> Iterator[Callable[[], None]]:
    """A transient bar over `total` episodes; yields the callback that `Rollouts.run` calls per episode."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        job = bar.add_task(label, total=total)
        yield lambda: bar.advance(job)


def trajectory_record(sample: SkyRLSample, sample_idx: int, output: dict[str, Any], i: int,
                      tokenizer: PreTrainedTokenizerBase, max_input_length: int) -> dict[str, Any]:
    """One trajectory in the eval format, from the generator output and the env's trace."""
    metrics = (output.get("env_metrics") or [{}] * (i + 1))[i] or {}
    trace = metrics.get("trace") or []
    gt = sample.ground_truth
    complexity = gt.get("complexity") or "unknown"  # an openenv_env row need not say
    prompt_ids, response_ids = output["prompt_token_ids"][i], output["response_ids"][i]
    answered = bool(metrics.get("answered"))
    success = bool(metrics.get("success"))
    # The env says why it ended an episode; one it did not end, SkyRL's generator cut: by the context
    # (max_input_length) or by its own turn limit (rollout.max_turns below the task's).
    stop = metrics.get("stop_reason") or (
        "context_overflow" if len(prompt_ids) + len(response_ids) >= max_input_length else "max_turns")
    answers = [t for t in trace if t.get("kind") == "answer"]
    return {
        "task_id": sample.task_id, "sample_idx": sample_idx, "data_source": sample.data_source,
        "complexity": complexity, "family": sample.family, "input_prompt": sample.prompt,
        "output_response": tokenizer.decode(response_ids, skip_special_tokens=False),
        "turns": trace, "score": [t.get("reward", 0.0) for t in trace],
        "reward": float(sum(t.get("reward", 0.0) for t in trace)), "success": success, "answered": answered,
        "answer_correct": answers[-1].get("answer_correct") if answers else None,
        "stop_reason": stop, "env_extras": {"task_id": sample.task_id, "data_source": sample.data_source,
                                            "complexity": complexity,
                                            "style": sample.extra_info.get("entity_style") or sample.extra_info.get("style")},
        "prompt_tokens": len(prompt_ids), "response_tokens": len(response_ids), "num_turns": len(trace),
    }
