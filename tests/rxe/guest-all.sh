#!/usr/bin/env bash
# Runs inside the rxe guest (tests/rxe/vm.sh run): the smoke checks, then the
# test binaries listed in MANIFEST ("group<TAB>path" lines): group "verbs"
# as they are, group "libfabric" on the verbs provider over rxe0.
# Prints the sum as "N passed, N failed" and exits non-zero on any failure.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
manifest=${1:?usage: guest-all.sh MANIFEST}
results=${RXE_RESULTS:-}
passed=0
failed=0
failed_parts=()

part() {
    local name=$1 log line p f
    shift
    echo "=== $name"
    log=$(mktemp)
    RXE_RESULTS='' "$@" 2>&1 | tee "$log"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    rm -f "$log"
    if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
        p=${BASH_REMATCH[1]}
        f=${BASH_REMATCH[2]}
    else
        p=0
        f=1
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    ((f == 0)) || failed_parts+=("$name")
    echo "=== $name: $p passed, $f failed"
}

verbs=()
libfabric=()
asyncwatch=
while IFS=$'\t' read -r group path; do
    case $group in
    verbs) verbs+=("$path") ;;
    libfabric) libfabric+=("$path") ;;
    asyncwatch) asyncwatch=$path ;;
    esac
done <"$manifest"

# The asyncwatch program: link down/up on veth0 must show PORT_ERR and
# PORT_ACTIVE on rxe0, and SIGINT must end it cleanly with status 0.
check_asyncwatch() {
    local log pid st p=0 f=0
    log=$(mktemp)
    check() {
        if "$@"; then p=$((p + 1)); echo "ok ${desc}"; else f=$((f + 1)); echo "FAILED ${desc}"; fi
    }
    desc="asyncwatch built"
    check test -x "$asyncwatch"
    "$asyncwatch" -d rxe0 -t 60 >"$log" 2>&1 &
    pid=$!
    sleep 1
    ip link set veth0 down
    sleep 1
    ip link set veth0 up
    # Taking the link down removed the policy routes through it.
    ip route replace 198.18.0.2 dev veth0 src 198.18.0.1 table 100 2>/dev/null
    ip route replace 198.18.0.1 dev veth1 src 198.18.0.2 table 101 2>/dev/null
    sleep 2
    kill -INT "$pid"
    wait "$pid"
    st=$?
    cat "$log"
    desc="asyncwatch shows PORT_ERR"
    check grep -q 'PORT_ERR.* on port 1' "$log"
    desc="asyncwatch shows PORT_ACTIVE"
    check grep -q 'PORT_ACTIVE.* on port 1' "$log"
    desc="asyncwatch exits 0 on SIGINT"
    check test "$st" -eq 0
    desc="asyncwatch says it was interrupted"
    check grep -q '^interrupted' "$log"
    desc="asyncwatch refuses an unknown device"
    check bash -c "! '$asyncwatch' -d nosuchdev >/dev/null 2>&1"
    rm -f "$log"
    echo "$p passed, $f failed"
}

export RXE_TEST_TIMEOUT=${RXE_TEST_TIMEOUT:-240}
part "smoke" "$here/guest-smoke.sh"
part "verbs tests" "$here/run-binaries.sh" "${verbs[@]}"
# The libfabric suite on the verbs provider (MSG over rdma_cm, and
# verbs;ofi_rxm for RDM, which needs FI_UNIVERSE_SIZE).
part "asyncwatch" check_asyncwatch
part "libfabric on verbs" env LIBFABRIC_TEST_PROVIDER=verbs \
    LIBFABRIC_TEST_NODE="${RXE_ADDRS%%,*}" FI_UNIVERSE_SIZE=64 \
    "$here/run-binaries.sh" "${libfabric[@]}"

summary="$passed passed, $failed failed"
((${#failed_parts[@]} == 0)) || echo "failed parts: ${failed_parts[*]}"
[[ -n $results ]] && echo "$summary" >"$results/summary"
echo "$summary"
((failed == 0))
