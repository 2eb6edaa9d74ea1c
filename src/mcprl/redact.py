"""Mask secrets before text leaves the process (judge requests, logs, reports).

Two sources of secrets are masked:

- values of environment variables whose names look secret (``*KEY``, ``*TOKEN``, ``*SECRET``,
  ``*PASSWORD``, ``*CREDENTIALS`` ...), read from ``os.environ`` at call time; values shorter than
  ``MIN_SECRET_CHARS`` are left alone so that ``DEBUG_TOKEN=1`` does not mask every "1";
- well-known token shapes (OpenAI/Anthropic ``sk-...``, ``Bearer ...``, Slack ``xox?-...``, AWS
  ``AKIA...``, GitHub ``ghp_...``, Hugging Face ``hf_...``, Google ``AIza...``, JWTs, PEM private
  keys, passwords in URLs), and in dicts the string value of a key such as ``api_key``, ``token``,
  ``password`` or ``authorization``.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Any

MASK = "[REDACTED]"
MIN_SECRET_CHARS = 6
MAX_DEPTH = 64

_SECRET_NAME = re.compile(
    r"(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|AUTH)S?(?:_|$)|^(?:.*_)?PASS(?:_|$)",
    re.IGNORECASE,
)
_SECRET_KEY = re.compile(
    r"(?:api_?key|access_?key|private_?key|secret(?:_?key)?|token|password|passwd|passphrase"
    r"|authorization|credentials?)$",
    re.IGNORECASE,
)
_PATTERNS = [
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.DOTALL),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
]
_PREFIXED = [
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/\-]{8,}=*"),
    re.compile(r"(://[^/\s:@]+:)[^/\s@]+(?=@)"),
]


def redact(value: Any) -> Any:
    """A copy of `value` (str, or JSON-like dict/list/tuple) with every secret replaced by MASK."""
    return _redact(value, _env_secret_pattern(_env_secrets()), 0)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable or dict key name looks like it holds a secret."""
    return bool(_SECRET_NAME.search(name))


def _redact(value: Any, env_pattern: re.Pattern[str] | None, depth: int) -> Any:
    if isinstance(value, str):
        return _redact_text(value, env_pattern)
    if depth >= MAX_DEPTH and isinstance(value, (dict, list, tuple)):
        return MASK
    if isinstance(value, dict):
        return {
            key: MASK if _secret_item(key, item) else _redact(item, env_pattern, depth + 1)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return type(value)(_redact(item, env_pattern, depth + 1) for item in value)
    return value


def _secret_item(key: Any, value: Any) -> bool:
    return isinstance(key, str) and isinstance(value, str) and bool(value) and bool(_SECRET_KEY.search(key))


def _redact_text(text: str, env_pattern: re.Pattern[str] | None) -> str:
    if env_pattern is not None:
        text = env_pattern.sub(MASK, text)
    for pattern in _PATTERNS:
        text = pattern.sub(MASK, text)
    for pattern in _PREFIXED:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return text


def _env_secrets() -> tuple[str, ...]:
    values = {v for k, v in os.environ.items() if is_secret_name(k) and len(v) >= MIN_SECRET_CHARS}
    return tuple(sorted(values, key=lambda v: (-len(v), v)))


@lru_cache(maxsize=8)
def _env_secret_pattern(values: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(map(re.escape, values))) if values else None
