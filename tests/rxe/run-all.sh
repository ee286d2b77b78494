#!/usr/bin/env bash
# The soft-RoCE part of the test suite, from the host:
#   1. builds the test binaries that need RDMA devices (ibverbs-async's rxe
#      tests, libibverbs-sys's verbs calls, and the libfabric suite, which runs
#      on the verbs provider here),
#   2. boots the qemu guest once (tests/rxe/vm.sh) and runs guest-all.sh in it,
#   3. prints the guest's "N passed, N failed" line last and exits non-zero
#      when anything failed, timed out or crashed.
# The summary line is also written to target/rxe-vm/last-summary.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
cache=target/rxe-vm
mkdir -p "$cache"
rm -f "$cache/last-summary"

say() { printf 'rxe: %s\n' "$*"; }

executables() {
    # cargo prints "Executable <name> (<path>)" for every test binary built:
    # relative to the workspace, or absolute with a CARGO_TARGET_DIR
    # elsewhere.
    sed -n 's/^ *Executable .*(\(.*\))$/\1/p'
}

# An absolute path for a path cargo printed or built.
absolute() {
    case $1 in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$root/$1" ;;
    esac
}
target_dir=${CARGO_TARGET_DIR:-target}

start=$SECONDS
say "building the test binaries"
ibv=$(cargo test -p ibverbs-async --features __rxe-tests,tokio --no-run 2>&1 | tee -a /dev/stderr | executables | grep '/rxe_' || true)
sys=$(cargo test -p libibverbs-sys --test verbs_calls --no-run 2>&1 | tee -a /dev/stderr | executables)
fab=$(cargo test -p libfabric-safe --all-features --tests --no-run 2>&1 | tee -a /dev/stderr | executables | grep -v -e '/compile_fail-' -e '/adversarial-' || true)
cargo build --example asyncwatch
asyncwatch=$target_dir/debug/examples/asyncwatch
cargo build --example rc_pingpong
rc_pingpong=$target_dir/debug/examples/rc_pingpong
if [[ -z $ibv || -z $sys || -z $fab ]]; then
    say "error: some test binaries were not built (ibverbs-async: ${ibv:-none}; libibverbs-sys: ${sys:-none}; libfabric: ${fab:-none})"
    echo "0 passed, 1 failed" | tee "$cache/last-summary"
    exit 1
fi
manifest=$cache/manifest
{
    for b in $ibv $sys; do printf 'verbs\t%s\n' "$(absolute "$b")"; done
    for b in $fab; do printf 'libfabric\t%s\n' "$(absolute "$b")"; done
    printf 'asyncwatch\t%s\n' "$(absolute "$asyncwatch")"
    printf 'rc_pingpong\t%s\n' "$(absolute "$rc_pingpong")"
} >"$manifest"
say "built in $((SECONDS - start)) s: $(wc -l <"$manifest") test binaries"

# soft-iWARP for the kernel the guest boots (Debian's has no siw.ko).
tests/rxe/vm.sh prepare
read -r kver _ <"$cache/stamp"
siw_ko=
if siw_ko=$(tests/rxe/build-siw.sh "$kver"); then
    say "siw: $siw_ko"
else
    say "siw.ko could not be built for $kver: the siw part will fail"
    siw_ko=
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
RXE_VM_EXTRA_ENV="${RXE_VM_EXTRA_ENV:-} SIW_KO=$siw_ko" RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-900} \
    tests/rxe/vm.sh run "$root/tests/rxe/guest-all.sh" "$root/$manifest" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1 || true)
if [[ -z $summary ]]; then
    summary="0 passed, 1 failed"
    [[ $status -ne 0 ]] || status=1
fi
echo "$summary" >"$cache/last-summary"
say "rxe part took $((SECONDS - start)) s"
echo "$summary"
exit "$status"
