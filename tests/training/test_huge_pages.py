"""`import mcprl.models` (the layer every model load goes through) puts torch's large CPU tensors on transparent huge pages, unless the user said otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import os, mcprl.models, torch
x = torch.ones(64 * 2**20 // 4)  # 64 MB
huge = [line for line in open("/proc/self/smaps_rollup") if line.startswith("AnonHugePages")]
print(os.environ["THP_MEM_ALLOC_ENABLE"], int(huge[0].split()[1]) if huge else -1)
"""


def _probe(**env: str) -> tuple[str, int]:
    clean = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         check=True)
    flag, huge_kb = out.stdout.split()
    return flag, int(huge_kb)


def _kernel_mode() -> str:
    """The kernel's transparent huge page mode: always, madvise or never."""
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    text = path.read_text() if path.exists() else "[never]"
    return text[text.index("[") + 1 : text.index("]")]


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="needs Linux /proc")
def test_import_turns_huge_pages_on_and_an_explicit_zero_keeps_them_off() -> None:
    mode = _kernel_mode()
    flag, huge_kb = _probe()
    assert flag == "1"
    if mode != "never":
        assert huge_kb >= 32 * 1024  # most of the 64 MB tensor sits on 2 MB pages
    flag, huge_kb = _probe(THP_MEM_ALLOC_ENABLE="0")
    assert flag == "0"
    if mode == "madvise":
        assert huge_kb == 0  # nothing asked, nothing given
