#!/usr/bin/env python
"""Build the hand-written held-out set: `python scripts/build_natural.py` (data/heldout/natural.yaml ->
data/heldout/natural.jsonl), executing every plan on fresh offline servers.

A stopgap until `mcprl data` has a command for it.
"""

import sys
from collections import Counter
from pathlib import Path

from mcprl.data.natural import build, write

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    samples = build(ROOT / "data/heldout/natural.yaml")
    out = write(samples, ROOT / "data/heldout/natural.jsonl")
    families = Counter(s.extra_info["family"] for s in samples)
    styles = Counter(s.extra_info["style"] for s in samples)
    print(f"{len(samples)} tasks, {len(families)} families -> {out.relative_to(ROOT)}")
    print("styles:", dict(sorted(styles.items())))
    sys.exit(0)
