#!/usr/bin/env bash
# Rule-based tasks -> data/processed/{train,val,test}.jsonl, each with its .experts.jsonl.
# NAME=quickstart writes data/processed/quickstart_{train,val,test}.jsonl instead (what configs/ read).
# Env: N_SAMPLES (1000), SEED (0), SPLIT (train=0.8,val=0.1,test=0.1). Extra args go to `mcprl data generate`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MCPRL="${MCPRL:-$([ -x "$ROOT/.venv/bin/mcprl" ] && echo "$ROOT/.venv/bin/mcprl" || echo mcprl)}"
exec $MCPRL data generate rules --n "${N_SAMPLES:-1000}" --seed "${SEED:-0}" \
  --out "$ROOT/data/processed/${NAME:+$NAME.jsonl}" --split "${SPLIT:-train=0.8,val=0.1,test=0.1}" "$@"
