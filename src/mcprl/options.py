"""The one way settings are declared: dataclass fields with a default and a one-line help text, which
the config loader, `--dry-run` and the generated reference (docs/training.md) all read."""

from __future__ import annotations

import copy
from dataclasses import field, is_dataclass
from typing import Any


def opt(default: Any, help: str) -> Any:  # noqa: A002 - `help` reads best in the field declarations
    """A dataclass field with a one-line help text; mutable defaults are copied per instance."""
    if isinstance(default, (list, dict)) or is_dataclass(default):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})
