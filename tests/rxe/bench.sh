#!/usr/bin/env bash
# Benchmarks on soft-RoCE, C beside Rust, from the host:
#   1. builds rc_pingpong and async_latency (release) and the C
#      async_latency (tests/rxe/async_latency.c, with gcc against libibverbs),
#   2. boots the qemu guest once (tests/rxe/vm.sh) and runs guest-bench.sh,
#   3. prints the table of medians with the Rust/C ratios and, last,
#      "rxe benchmarks: done"; exits non-zero when a program failed.
# Timings under TCG are noisy: the guest interleaves C and Rust runs and
# reports medians. RXE_BENCH_ROUNDS, RXE_BENCH_ITERS, RXE_BENCH_SIZE and
# RXE_BENCH_FLAPS are passed on to the guest (see guest-bench.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cache=target/rxe-vm
mkdir -p "$cache"

say() { printf 'rxe bench: %s\n' "$*"; }

start=$SECONDS
say "building"
cargo build --release --example rc_pingpong --example async_latency
rc_rust=target/release/examples/rc_pingpong
async_rust=target/release/examples/async_latency
async_c=$cache/async_latency_c
gcc -O2 -Wall -Wextra -o "$async_c" tests/rxe/async_latency.c -libverbs
command -v ibv_rc_pingpong >/dev/null || {
    say "error: ibv_rc_pingpong not found (apt-get install ibverbs-utils)"
    exit 1
}

# One qemu at a time on this machine: wait for another run to finish.
waited=0
while pgrep -f qemu-system >/dev/null; do
    ((waited % 30)) || say "waiting for another qemu guest to finish"
    sleep 5
    waited=$((waited + 5))
    if ((waited > 900)); then
        say "error: another qemu guest is still running after 15 minutes"
        exit 1
    fi
done

extra="${RXE_VM_EXTRA_ENV:-}"
for v in RXE_BENCH_ROUNDS RXE_BENCH_ITERS RXE_BENCH_SIZE RXE_BENCH_FLAPS; do
    [[ -n ${!v:-} ]] && extra+=" $v=${!v}"
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
RXE_VM_EXTRA_ENV="$extra" RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-300} \
    tests/rxe/vm.sh run "$root/tests/rxe/guest-bench.sh" \
    "$root/$rc_rust" "$root/$async_rust" "$root/$async_c" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

echo
say "took $((SECONDS - start)) s"
# The table again, last, without the guest's console noise around it.
sed -n '/^=== results$/,/^=== end$/p' "$log" | sed '1d;$d' || true
if [[ $status -eq 0 ]] && grep -q '^rxe benchmarks: done$' "$log"; then
    echo "rxe benchmarks: done"
    exit 0
fi
grep '^FAILED ' "$log" || true
say "failed (guest status $status)"
exit $((status == 0 ? 1 : status))
