"""Orders that deal a seeded shuffle round-robin over task families (GRPO's prompts; SFT's demos on request).

A small model learns or fails a task family as a whole, so a few prompts a step should span the
families rather than follow a shuffle's clusters (docs/training.md, "Prompt order").
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Iterator, Literal, Sequence

if TYPE_CHECKING:
    from mcprl.data.sample import SkyRLSample

PromptOrder = Literal["shuffle", "stratified"]  # the orders `prompt_stream` and `sft.batches` implement


def interleave_families(order: list[int], families: Sequence[str]) -> list[int]:
    """Round-robin over the families (`families[i]` is item i's) in `order`'s order of first appearance,
    each family's items in `order`."""
    queues: dict[str, list[int]] = {}
    for i in order:
        queues.setdefault(families[i], []).append(i)
    lists = list(queues.values())
    return [q[k] for k in range(max(map(len, lists), default=0)) for q in lists if k < len(q)]


def prompt_stream(tasks: list[SkyRLSample], seed: int, order: PromptOrder) -> Iterator[SkyRLSample]:
    """Tasks in a fresh seeded order every epoch; position n is reproducible from (seed, n).

    `stratified` cycles through the task families, so any F consecutive draws hold F families while each
    lasts: a few prompts a step then span the families instead of drifting towards the ones they happen to sample.
    """
    epoch = 0
    while True:
        positions = list(range(len(tasks)))
        random.Random(f"{seed}:grpo:{epoch}").shuffle(positions)
        if order == "stratified":
            positions = interleave_families(positions, [t.family for t in tasks])
        yield from (tasks[i] for i in positions)
        epoch += 1
