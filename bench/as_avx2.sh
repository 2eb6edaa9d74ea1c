#!/bin/sh
# Run a command as on the slowest machine kind (AVX2 only, fp32) on a faster one: the command sees a
# /proc/cpuinfo without the AVX-512 and AMX flags (so mcprl picks fp32, as it does there) and torch, oneDNN
# and MKL are held to AVX2 kernels. The clock speed stays this machine's: compare with bench/machine_speed.py
# run the same way (its fp32 GFLOP/s against the AVX2 machines' 26-57 in docs/benchmarks.md).
# SLOWDOWN=K also caps the command and its children at 1/K of the machine's CPU time (a cgroup CPU quota),
# for a machine K times slower: waits and timeouts stay wall-clock, as they do there.
#
#   bench/as_avx2.sh .venv/bin/python bench/machine_speed.py
#   bench/as_avx2.sh make test
#   SLOWDOWN=3.2 bench/as_avx2.sh make test
#
# Needs a mount namespace (root, or unprivileged user namespaces); SLOWDOWN needs a writable cgroup
# (v2 cpu.max or v1 cpu.cfs_quota_us).
set -eu
[ $# -gt 0 ] || { echo "usage: [SLOWDOWN=K] bench/as_avx2.sh COMMAND [ARGS...]" >&2; exit 2; }
fake=$(mktemp)
group=""
cleanup() {
    rm -f "$fake"
    [ -n "$group" ] || return 0
    echo $$ > "$(dirname "$group")/cgroup.procs"
    for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$group" 2>/dev/null && return 0; sleep 1; done  # children exiting
}
trap cleanup EXIT
if [ -n "${SLOWDOWN:-}" ]; then
    cpus=$(nproc)
    quota=$(awk -v k="$SLOWDOWN" -v n="$cpus" 'BEGIN { printf "%d", 100000 * n / k }')
    if [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control; then
        group=/sys/fs/cgroup/as_avx2_$$ && mkdir "$group" && echo "$quota 100000" > "$group/cpu.max"
    elif [ -d /sys/fs/cgroup/cpu ]; then
        group=/sys/fs/cgroup/cpu/as_avx2_$$ && mkdir "$group" && echo 100000 > "$group/cpu.cfs_period_us" \
            && echo "$quota" > "$group/cpu.cfs_quota_us"
    else
        echo "SLOWDOWN needs a writable cgroup (cpu controller)" >&2; exit 2
    fi
    echo $$ > "$group/cgroup.procs"
fi
sed -E 's/ (avx512[a-z_0-9]*|amx[a-z_0-9]*)//g' /proc/cpuinfo > "$fake"
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
unshare -m sh -c 'mount --bind "$0" /proc/cpuinfo && exec "$@"' "$fake" "$@"
