"""Device, dtype and thread choices for the small-model CPU/GPU path.

bf16 pays off on a CPU only when it has native bf16 matmul (AMX or AVX512-BF16); elsewhere it
is emulated and slower than fp32. One intra-op thread is the default because two threads on the
2-core box collapse as soon as the other core is busy (OpenMP barriers stall; see docs/model.md).
"""

from __future__ import annotations

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
