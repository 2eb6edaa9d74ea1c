#!/usr/bin/env bash
# Build the env from a dataset sample, init() and one step: prints reward, done and metadata keys.
# Usage: scripts/launch_env_check.sh [DATA_FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/mcprl env check ${1:+--data "$1"}
