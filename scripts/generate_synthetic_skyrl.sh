#!/usr/bin/env bash
# Rule-based tasks as Parquet for SkyRL's trainer: OUT_DIR/{train,validation}.parquet (+ .experts.jsonl).
# Usage: scripts/generate_synthetic_skyrl.sh [OUT_DIR (data/processed/skyrl)] [extra options]
# Env: N_SAMPLES (1000), SEED (0), SPLIT (train=0.9,validation=0.1).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT_DIR="$ROOT/data/processed/skyrl"
if [ $# -gt 0 ] && [[ "$1" != -* ]]; then OUT_DIR="$1"; shift; fi
MCPRL="${MCPRL:-$([ -x "$ROOT/.venv/bin/mcprl" ] && echo "$ROOT/.venv/bin/mcprl" || echo mcprl)}"
exec $MCPRL data generate --method rules --n "${N_SAMPLES:-1000}" --seed "${SEED:-0}" --out "$OUT_DIR/" \
  --split "${SPLIT:-train=0.9,validation=0.1}" --format parquet "$@"
