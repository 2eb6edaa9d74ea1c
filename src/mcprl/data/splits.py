"""Seeded train/val/test splits with no near-duplicate task on both sides of a split.

Tasks are grouped by a near-duplicate key: `extra_info["dedup_key"]` when the generator set one,
else the user message lower-cased with numbers, quoted strings, URLs, emails, #channels and
capitalised names masked, plus the sequence of tool names. "What did AAPL close at on 2024-03-01?"
and "What did MSFT close at on 2023-11-17?" share a key, so they land in the same split.

Whole groups are assigned: groups are ordered by a hash of (seed, key), and each goes to the split
furthest below its target size. Same seed + same input -> same split and byte-identical files.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from mcprl.data.sample import SkyRLSample
from mcprl.errors import McprlError

_URL = re.compile(r"https?://\S+|\b[\w.+-]+@[\w-]+\.[\w.]+\b")
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'|`[^`]*`")
_CHANNEL = re.compile(r"[#@][\w-]+")
_NUMBER = re.compile(r"[-+]?\$?\d[\d,]*(?:\.\d+)?%?")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w&-]*")
_SPACE = re.compile(r"\s+")
_RUN = re.compile(r"<(\w+)>(?:[\s/-]*<\1>)+")  # "Meta Platforms" -> <name> <name> -> <name>


class SplitError(McprlError, ValueError):
    """A --split spec that cannot work; the message shows the expected form."""


def parse_split(spec: str) -> dict[str, float]:
    """'train=0.8,val=0.1,test=0.1' -> {'train': 0.8, 'val': 0.1, 'test': 0.1} (fractions sum to 1)."""
    fractions: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, eq, value = part.partition("=")
        try:
            fraction = float(value)
        except ValueError:
            fraction = -1.0
        if not eq or not re.fullmatch(r"[A-Za-z0-9_-]+", name.strip()) or fraction <= 0:
            raise SplitError(f"bad split part {part!r} in {spec!r}; "
                             "write NAME=FRACTION,... e.g. train=0.8,val=0.1,test=0.1")
        if name.strip() in fractions:
            raise SplitError(f"split {name.strip()!r} is named twice in {spec!r}")
        fractions[name.strip()] = fraction
    if not fractions or abs(sum(fractions.values()) - 1.0) > 1e-6:
        raise SplitError(f"split fractions in {spec!r} must sum to 1, got {sum(fractions.values()):g}")
    return fractions


def user_text(sample: SkyRLSample) -> str:
    return next((m["content"] for m in reversed(sample.prompt) if m.get("role") == "user"), "")


def dedup_key(sample: SkyRLSample) -> str:
    """The near-duplicate key of a task (see the module docstring)."""
    given = sample.extra_info.get("dedup_key")
    if given:
        return str(given)
    text = _URL.sub("<url>", user_text(sample))
    text = _QUOTED.sub("<str>", text)
    text = _CHANNEL.sub("<ref>", text)
    text = _NUMBER.sub("<num>", text)
    text = _RUN.sub(r"<\1>", _NAME.sub("<name>", text.strip()))
    text = _SPACE.sub(" ", text.lower())
    tools = ">".join(str(step.get("tool")) for step in sample.ground_truth.get("tool_sequence", []))
    return f"{text}|{tools}"


def split_samples(samples: list[SkyRLSample], fractions: dict[str, float], seed: int) -> dict[str, list[SkyRLSample]]:
    """Assign whole near-duplicate groups to splits; each split keeps the input order."""
    groups: dict[str, list[int]] = {}
    for i, sample in enumerate(samples):
        groups.setdefault(dedup_key(sample), []).append(i)
    order = sorted(groups, key=lambda key: hashlib.sha256(f"{seed}\x00{key}".encode()).hexdigest())
    targets = {name: fraction * len(samples) for name, fraction in fractions.items()}
    assigned: dict[str, list[int]] = {name: [] for name in fractions}
    for key in order:
        name = max(fractions, key=lambda n: (targets[n] - len(assigned[n])) / fractions[n])
        assigned[name].extend(groups[key])
    return {name: [samples[i] for i in sorted(idx)] for name, idx in assigned.items()}


def split_path(out: str | Path, name: str, fmt: str = "jsonl") -> Path:
    """Where split `name` goes: DIR/NAME.FMT when `out` is a directory (no suffix or a trailing /),
    else OUT_STEM_NAME.SUFFIX next to `out` (tasks.jsonl -> tasks_train.jsonl)."""
    out = Path(out)
    if is_directory(out):
        return out / f"{name}.{fmt}"
    return out.with_name(f"{out.stem}_{name}{out.suffix}")


def is_directory(out: str | Path) -> bool:
    return str(out).endswith(("/", "\\")) or Path(out).is_dir() or not Path(out).suffix
