#!/bin/sh
# Run a command as on the slowest machine kind (AVX2 only, fp32) on a faster one: the command sees a
# /proc/cpuinfo without the AVX-512 and AMX flags (so mcprl picks fp32, as it does there) and torch, oneDNN
# and MKL are held to AVX2 kernels. The clock speed stays this machine's: compare with bench/machine_speed.py
# run the same way (its fp32 GFLOP/s against the AVX2 machines' 26-57 in docs/benchmarks.md).
#
#   bench/as_avx2.sh .venv/bin/python bench/machine_speed.py
#   bench/as_avx2.sh make test
#
# Needs a mount namespace (root, or unprivileged user namespaces).
set -eu
[ $# -gt 0 ] || { echo "usage: bench/as_avx2.sh COMMAND [ARGS...]" >&2; exit 2; }
fake=$(mktemp)
trap 'rm -f "$fake"' EXIT
sed -E 's/ (avx512[a-z_0-9]*|amx[a-z_0-9]*)//g' /proc/cpuinfo > "$fake"
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
unshare -m sh -c 'mount --bind "$0" /proc/cpuinfo && exec "$@"' "$fake" "$@"
