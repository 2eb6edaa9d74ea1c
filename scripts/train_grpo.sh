#!/usr/bin/env bash
# GRPO on SkyRL's distributed trainer (Ray + FSDP + vLLM).
#   scripts/train_grpo.sh [CONFIG] [--run] [--resume] [-o section.key=value ...]
# Without --run: a dry run that prints the SkyRL overrides after SkyRL's own validate_cfg accepted
# them (any machine). With --run: writes the parquet datasets, starts Ray and trains (CUDA GPUs,
# vLLM and skyrl[fsdp] needed; see docs/training.md). CONFIG defaults to configs/cluster.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."

config=configs/cluster.yaml
mode=--dry-run
args=()
while (($#)); do
  case "$1" in
    --run) mode="" ;;
    --resume) args+=(--resume) ;;
    -o|--override) args+=(--override "$2"); shift ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "train_grpo.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) config="$1" ;;
  esac
  shift
done

# The interpreter: $PYTHON, else the active virtualenv, else ./.venv, else python3.
py=${PYTHON:-}
[[ -z $py && -n ${VIRTUAL_ENV:-} ]] && py=$VIRTUAL_ENV/bin/python
[[ -z $py && -x .venv/bin/python ]] && py=.venv/bin/python
py=${py:-python3}
# Same as `mcprl train --engine skyrl ...`.
exec "$py" -m mcprl.cli.train --engine skyrl --config "$config" ${mode:+"$mode"} ${args[@]+"${args[@]}"}
