"""GRPO's prompt stream: which training tasks GRPO draws (algo.prompts), in which order (algo.prompt_order),
from the position the run has reached."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Sequence

from mcprl.data.sample import SkyRLSample
from mcprl.errors import ConfigError
from mcprl.training.ordering import prompt_stream

if TYPE_CHECKING:  # the run (torch, the model) only as a type: the prompt stream is plain data
    from mcprl.training.loop.hooks import GRPOHook
    from mcprl.training.run import Run


def grpo_prompts(run: Run, hooks: Sequence[GRPOHook] = ()) -> Iterator[SkyRLSample]:
    """Every training task, or those SFT had no demo of, as the hooks change the stream (experimental.probe),
    past the prompts the run has drawn. Position n is reproducible from (seed, n)."""
    cfg, tasks = run.cfg, run.train_tasks
    if cfg.algo.prompts != "all" and any("demo" in t.extra_info for t in tasks):
        tasks = without_demo(tasks, cfg.algo.prompts, cfg.data.generate.no_demo_families)
    stream = prompt_stream(tasks, cfg.run.seed, cfg.algo.prompt_order)
    for hook in hooks:
        stream = hook.prompts(tasks, stream)
    for _ in range(run.state.grpo_prompts_drawn):
        next(stream)
    return stream


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
