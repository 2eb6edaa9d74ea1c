"""Every make target works from a fresh clone as far as a dry run can tell (issue 49, finding 9: `make
bench-trl` named a venv that lacked the default model's package): it parses, and each file its recipe
runs (a bench, a script, a config) is in the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PHONY = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
FILES = re.compile(r"(?<![\w./-])((?:bench|scripts|configs|examples)/[\w./-]+\.(?:py|sh|yaml))")


@pytest.mark.parametrize("target", PHONY)
def test_target_dry_runs_and_names_files_that_exist(target: str) -> None:
    done = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    missing = sorted({f for f in FILES.findall(done.stdout) if not (ROOT / f).exists()})
    assert not missing, f"make {target} runs files that are not in the repository: {missing}"
