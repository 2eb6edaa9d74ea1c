"""Device, dtype and thread choices for the small-model CPU/GPU path.

bf16 pays off on a CPU only when it has native bf16 matmul (AMX or AVX512-BF16); elsewhere it
is emulated and slower than fp32. One intra-op thread is the default because two threads on the
2-core box collapse as soon as the other core is busy (OpenMP barriers stall; see docs/model.md).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
from collections.abc import Iterator
from pathlib import Path

import torch

_BF16_CPU_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def pick_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU feature flags (empty where /proc/cpuinfo does not exist, e.g. macOS)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def pick_dtype(device: torch.device | str) -> torch.dtype:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.bfloat16 if cpu_flags() & _BF16_CPU_FLAGS else torch.float32


def configure_threads(n: int = 1) -> None:
    """Set torch's intra-op threads (1 by default: the other core serves MCP servers and envs)."""
    torch.set_num_threads(n)


TRIM_HEADROOM_GB = 1.5
_trimmed_at_gb: float | None = None  # RSS right after the last trim


def release_memory(headroom_gb: float = TRIM_HEADROOM_GB) -> bool:
    """Hand freed heap back to the OS once the process has grown `headroom_gb` past its last trim.

    glibc keeps what a step's activations freed, fragmented by variable-length batches, so without
    trimming RSS creeps by GBs per phase (SFT: 3.7 -> 6.9 GB over 30 steps). Never trimming ran 8 SFT
    steps 13% faster than a trim after each (page faults re-zeroing what the next step takes back);
    trimming only past the headroom keeps RSS as flat (bench/sft_step.py), its speed within noise of
    trimming every step there.
    """
    global _trimmed_at_gb
    gc.collect()
    if _trimmed_at_gb is not None and rss_gb() < _trimmed_at_gb + headroom_gb:
        return False
    libc = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(libc), "malloc_trim", None) if libc else None
    if trim is not None:
        trim(0)
    _trimmed_at_gb = rss_gb()
    return True


@contextlib.contextmanager
def long_lived_heap() -> Iterator[None]:
    """Keep what is alive now (modules, the model, the servers' data: ~600k objects) out of the collector's
    scans until the block ends, so `release_memory`'s collection after each step walks only what the run
    made since: it took 0.34 s a step, and the SFT step ran 1.36x faster without it (bench/gc_freeze.py).
    Garbage is collected first, so nothing dead is kept."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def rss_gb() -> float:
    """Resident memory of this process (0 where /proc is missing)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except OSError:
        return 0.0
    return pages * 4096 / 2**30
