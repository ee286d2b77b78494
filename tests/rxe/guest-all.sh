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
while IFS=$'\t' read -r group path; do
    case $group in
    verbs) verbs+=("$path") ;;
    libfabric) libfabric+=("$path") ;;
    esac
done <"$manifest"

export RXE_TEST_TIMEOUT=${RXE_TEST_TIMEOUT:-240}
part "smoke" "$here/guest-smoke.sh"
part "verbs tests" "$here/run-binaries.sh" "${verbs[@]}"
# The libfabric suite on the verbs provider (MSG over rdma_cm, and
# verbs;ofi_rxm for RDM, which needs FI_UNIVERSE_SIZE).
part "libfabric on verbs" env LIBFABRIC_TEST_PROVIDER=verbs \
    LIBFABRIC_TEST_NODE="${RXE_ADDRS%%,*}" FI_UNIVERSE_SIZE=64 \
    "$here/run-binaries.sh" "${libfabric[@]}"

summary="$passed passed, $failed failed"
((${#failed_parts[@]} == 0)) || echo "failed parts: ${failed_parts[*]}"
[[ -n $results ]] && echo "$summary" >"$results/summary"
echo "$summary"
((failed == 0))
