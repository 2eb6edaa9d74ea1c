"""What the side-by-side benches share: each variant runs in a fresh process, so no variant inherits
another's warm kernels, allocator state or thread settings, and hands back its result as the last
line of its stdout (JSON); the results print as one rich table.

The bench scripts import this as a sibling module (`python bench/NAME.py` puts bench/ on sys.path).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def run_variant(script: str, args: Sequence[str], *, python: str = sys.executable,
                env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run `python script *args` and return the JSON object on its last stdout line; its stderr (logs,
    a traceback) passes through, and a failed variant stops the bench with its exit status."""
    out = subprocess.run([python, script, *args], stdout=subprocess.PIPE, text=True, env=env)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        sys.exit(f"{Path(script).name} {' '.join(args)} failed (exit {out.returncode}; -9 is usually the OOM killer)")
    return json.loads(lines[-1])


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], *, width: int | None = None) -> None:
    """First column (the variant) left-aligned, numbers right-aligned."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    Console(width=width).print(table)
