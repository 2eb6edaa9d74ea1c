"""Orders that deal a seeded shuffle round-robin over task families (GRPO's prompts; SFT's demos on request).

A small model learns or fails a task family as a whole, so a few prompts a step should span the
families rather than follow a shuffle's clusters (docs/training.md, "Prompt order").
"""

from __future__ import annotations

from typing import Sequence


def interleave_families(order: list[int], families: Sequence[str]) -> list[int]:
    """Round-robin over the families (`families[i]` is item i's) in `order`'s order of first appearance,
    each family's items in `order`."""
    queues: dict[str, list[int]] = {}
    for i in order:
        queues.setdefault(families[i], []).append(i)
    lists = list(queues.values())
    return [q[k] for k in range(max(map(len, lists), default=0)) for q in lists if k < len(q)]
