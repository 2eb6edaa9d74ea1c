#!/usr/bin/env bash
# LLM-proposed, execution-checked tasks -> OUT (+ OUT's .experts.jsonl and .dropped.jsonl).
# Usage: scripts/generate_llm_dataset.sh OUT.jsonl [extra `mcprl data generate` options, e.g. --split ...]
# Env: OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL (gpt-4o-mini), OPENAI_BACKEND (chat|responses),
#      N_SAMPLES, MAX_TOOLS, MAX_TURNS, DOMAINS (servers, comma-separated), COMPLEXITIES, LLM_CONCURRENCY.
set -euo pipefail
OUT="${1:?usage: scripts/generate_llm_dataset.sh OUT.jsonl [options]}"
shift
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MCPRL="${MCPRL:-$([ -x "$ROOT/.venv/bin/mcprl" ] && echo "$ROOT/.venv/bin/mcprl" || echo mcprl)}"
exec $MCPRL data generate --method llm --out "$OUT" "$@"
