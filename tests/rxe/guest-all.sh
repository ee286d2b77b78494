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
    local name=$1 log line p f start=$SECONDS
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
    echo "=== $name: $p passed, $f failed ($((SECONDS - start)) s)"
}

verbs=()
libfabric=()
asyncwatch=
rc_pingpong=
while IFS=$'\t' read -r group path; do
    case $group in
    verbs) verbs+=("$path") ;;
    libfabric) libfabric+=("$path") ;;
    asyncwatch) asyncwatch=$path ;;
    rc_pingpong) rc_pingpong=$path ;;
    esac
done <"$manifest"

# The asyncwatch program (ibverbs-async's asynchronous events): link
# down/up on the device's netdev must show PORT_ERR and PORT_ACTIVE, and
# SIGINT must end it cleanly with status 0.
#   check_asyncwatch [DEVICE NETDEV]   (default rxe0 veth0)
check_asyncwatch() {
    local dev=${1:-rxe0} net=${2:-veth0} log pid st p=0 f=0
    log=$(mktemp)
    check() {
        if "$@"; then p=$((p + 1)); echo "ok ${desc}"; else f=$((f + 1)); echo "FAILED ${desc}"; fi
    }
    desc="asyncwatch built"
    check test -x "$asyncwatch"
    "$asyncwatch" -d "$dev" -t 60 >"$log" 2>&1 &
    pid=$!
    sleep 1
    ip link set "$net" down
    sleep 1
    ip link set "$net" up
    # Taking the link down removed the policy routes through it.
    ip route replace 198.18.0.2 dev veth0 src 198.18.0.1 table 100 2>/dev/null
    ip route replace 198.18.0.1 dev veth1 src 198.18.0.2 table 101 2>/dev/null
    ip route replace 198.18.2.2 dev veth2 src 198.18.2.1 table 102 2>/dev/null
    ip route replace 198.18.2.1 dev veth3 src 198.18.2.2 table 103 2>/dev/null
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
# verbs;ofi_rxm for RDM, which needs FI_UNIVERSE_SIZE). The progress
# lock's model calls no C: it runs in the host tests, not in the guest.
part "asyncwatch" check_asyncwatch
# Soft-iWARP: the same libfabric suite on the verbs provider over siw0
# (iWARP connects only through rdma_cm; the suite asserts the differences
# where LIBFABRIC_TEST_IWARP is set).
# shellcheck source=siw-setup.sh
. "$here/siw-setup.sh"
siw_failed() {
    echo "$1"
    echo "0 passed, 1 failed"
}
# RC queue pairs are connected by hand (modify_qp with the peer's
# address) on RoCE; iWARP connects only through rdma_cm, so rc_pingpong's
# hand-made connection must fail there, cleanly and with an error.
check_rc_pingpong_refused_on_iwarp() {
    local work port=18700 st cst server
    work=$(mktemp -d)
    timeout -k 5 30 "$rc_pingpong" -d siw0 -p "$port" -n 5 >"$work/server" 2>&1 &
    server=$!
    sleep 1
    timeout -k 5 30 "$rc_pingpong" -d siw1 -p "$port" -n 5 "${SIW_ADDRS%%,*}" >"$work/client" 2>&1
    cst=$?
    wait "$server"
    st=$?
    if ((cst != 0 && cst != 124)) && ! grep -q 'iters in' "$work/client"; then
        echo "ok rc_pingpong over iWARP is refused (client status $cst): $(tail -n 1 "$work/client")"
        echo "1 passed, 0 failed"
    else
        echo "FAILED rc_pingpong over iWARP: client status $cst, server $st"
        sed 's/^/    client: /' "$work/client"
        sed 's/^/    server: /' "$work/server"
        echo "0 passed, 1 failed"
    fi
    rm -rf "$work"
}

siw_ok=0
siw_msg=$(siw_setup 2>&1) && siw_ok=1
# The libfabric suite over siw0 runs beside the rxe parts below: each
# waits on its device most of the time (run one after the other, the two
# took 76 s and 64 s). The siw parts that take links down run after it.
if ((siw_ok)); then
    siw_suite_log=$(mktemp)
    (
        start=$SECONDS
        env LIBFABRIC_TEST_PROVIDER=verbs LIBFABRIC_TEST_NODE="${SIW_ADDRS%%,*}" \
            LIBFABRIC_TEST_IWARP=1 FI_UNIVERSE_SIZE=64 FI_MR_CACHE_MAX_COUNT=0 \
            "$here/run-binaries.sh" "${libfabric[@]}" -- --skip progress::model
        echo "(the suite over siw took $((SECONDS - start)) s)"
    ) >"$siw_suite_log" 2>&1 </dev/null &
    siw_suite=$!
fi
# verbs caches registrations with every access and keeps them after
# fi_close unless FI_MR_CACHE_MAX_COUNT=0: the crate registers the
# application's memory only without the cache (checked by the part after).
part "libfabric on verbs" env LIBFABRIC_TEST_PROVIDER=verbs \
    LIBFABRIC_TEST_NODE="${RXE_ADDRS%%,*}" FI_UNIVERSE_SIZE=64 FI_MR_CACHE_MAX_COUNT=0 \
    "$here/run-binaries.sh" "${libfabric[@]}" -- --skip progress::model
rma_bins=()
for b in "${libfabric[@]}"; do
    [[ ${b##*/} == rma-* ]] && rma_bins+=("$b")
done
part "libfabric on verbs with its registration cache" env LIBFABRIC_TEST_PROVIDER=verbs \
    LIBFABRIC_TEST_NODE="${RXE_ADDRS%%,*}" FI_UNIVERSE_SIZE=64 \
    "$here/run-binaries.sh" "${rma_bins[@]}" -- user_memory_is_refused_where_registrations_are_cached

# Counters: verbs has none (its open is a typed error, checked above);
# verbs;ofi_rxm has libfabric's util counters, tested here over rxe0.
cntr_bins=()
for b in "${libfabric[@]}"; do
    [[ ${b##*/} == cntr-* ]] && cntr_bins+=("$b")
done
part "libfabric counters on verbs;ofi_rxm" env LIBFABRIC_TEST_PROVIDER='verbs;ofi_rxm' \
    LIBFABRIC_TEST_NODE="${RXE_ADDRS%%,*}" FI_UNIVERSE_SIZE=64 FI_MR_CACHE_MAX_COUNT=0 \
    "$here/run-binaries.sh" "${cntr_bins[@]}"

if ((siw_ok)); then
    # The suite over siw, run beside the rxe parts above: its output now,
    # before the parts that take siw's links down.
    wait "$siw_suite"
    part "libfabric on verbs over siw" cat "$siw_suite_log"
    rm -f "$siw_suite_log"
    part "siw smoke" siw_smoke
    part "asyncwatch on siw" check_asyncwatch siw0 veth2
    # ibverbs-async's device tests on siw0/siw1: the ones that connect RC
    # queue pairs by hand (RoCE only) print a typed SKIP line.
    ibv_bins=()
    for b in "${verbs[@]}"; do
        [[ ${b##*/} == rxe_* ]] && ibv_bins+=("$b")
    done
    part "ibverbs-async on siw" env IBV_TEST_DEVICES=siw0,siw1 IBV_TEST_NETDEVS=veth2,veth3 \
        IBV_TEST_IWARP=1 \
        IBV_TEST_ROUTES="route replace 198.18.2.2 dev veth2 src 198.18.2.1 table 102;route replace 198.18.2.1 dev veth3 src 198.18.2.2 table 103" \
        "$here/run-binaries.sh" "${ibv_bins[@]}" -- --nocapture
    part "rc_pingpong refused on iWARP" check_rc_pingpong_refused_on_iwarp
else
    part "siw setup" siw_failed "$siw_msg"
fi

# The rc_pingpong example: Rust against Rust, Rust against rdma-core's
# ibv_rc_pingpong in both roles (same wire format), with and without -e, and
# its errors for a missing device and a bad option.
check_rc_pingpong() {
    local p=0 f=0 port=18600 gid=${RXE_GID_INDEX:-1} work server st
    work=$(mktemp -d)
    # pair DESC SERVER-BINARY CLIENT-BINARY [ARGS...]
    pair() {
        local desc=$1 sbin=$2 cbin=$3 cst
        shift 3
        port=$((port + 1))
        timeout -k 5 60 "$sbin" -d rxe0 -g "$gid" -p "$port" -n 50 "$@" >"$work/server" 2>&1 &
        server=$!
        local n=100
        until grep -q "$(printf ':%04X ' "$port")" /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
            ((n-- > 0)) || break
            sleep 0.1
        done
        timeout -k 5 60 "$cbin" -d rxe1 -g "$gid" -p "$port" -n 50 "$@" "${RXE_ADDRS%%,*}" \
            >"$work/client" 2>&1
        cst=$?
        wait "$server"
        st=$?
        if ((st == 0 && cst == 0)) && grep -q '^50 iters in' "$work/client" &&
            grep -q '^50 iters in' "$work/server"; then
            p=$((p + 1))
            echo "ok rc_pingpong $desc: $(grep 'iters in' "$work/client")"
        else
            f=$((f + 1))
            echo "FAILED rc_pingpong $desc (server $st, client $cst)"
            sed 's/^/    server: /' "$work/server"
            sed 's/^/    client: /' "$work/client"
        fi
    }
    if [[ ! -x $rc_pingpong ]]; then
        echo "FAILED rc_pingpong not built"
        echo "0 passed, 1 failed"
        return
    fi
    pair "Rust <-> Rust" "$rc_pingpong" "$rc_pingpong"
    pair "Rust <-> Rust, -e" "$rc_pingpong" "$rc_pingpong" -e
    pair "C server, Rust client" "$(command -v ibv_rc_pingpong)" "$rc_pingpong"
    pair "Rust server, C client, -e" "$rc_pingpong" "$(command -v ibv_rc_pingpong)" -e
    "$rc_pingpong" -d nosuchdev >"$work/out" 2>&1
    st=$?
    if ((st == 1)) && grep -q 'no RDMA device named "nosuchdev"' "$work/out"; then
        p=$((p + 1))
        echo "ok rc_pingpong refuses a missing device: $(head -n 1 "$work/out")"
    else
        f=$((f + 1))
        echo "FAILED rc_pingpong -d nosuchdev: status $st"
        cat "$work/out"
    fi
    "$rc_pingpong" -s nonsense >"$work/out" 2>&1
    st=$?
    if ((st == 2)) && grep -q -- '-s: "nonsense" is not a valid number' "$work/out"; then
        p=$((p + 1))
        echo "ok rc_pingpong refuses a bad option: $(head -n 1 "$work/out")"
    else
        f=$((f + 1))
        echo "FAILED rc_pingpong -s nonsense: status $st"
        cat "$work/out"
    fi
    rm -rf "$work"
    echo "$p passed, $f failed"
}
part "rc_pingpong" check_rc_pingpong

# Device tests under valgrind's memcheck: no invalid access, no use of
# uninitialised memory, no definite or indirect leak (libibverbs' one-time
# allocations for the device list are only "possibly lost" or reachable,
# which do not count). valgrind_tests BINARY ARGS...: runs the rxe_* test
# binary named BINARY with ARGS (a test filter), property tests with few
# cases.
valgrind_tests() {
    local name=$1 bin= p st log
    shift
    for p in "${verbs[@]}"; do
        [[ ${p##*/} == "$name"-* ]] && bin=$p
    done
    if [[ -z $bin ]] || ! command -v valgrind >/dev/null; then
        echo "FAILED: ${bin:-the $name test binary is not in the manifest}; valgrind: $(command -v valgrind || echo missing)"
        echo "0 passed, 1 failed"
        return
    fi
    log=$(mktemp)
    PROPTEST_CASES=${VALGRIND_PROPTEST_CASES:-8} timeout -k 10 "$RXE_TEST_TIMEOUT" \
        valgrind --fair-sched=yes --error-exitcode=99 --leak-check=full \
        --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
        "$bin" "$@" --test-threads=1 --nocapture 2>&1 | tee "$log"
    st=${PIPESTATUS[0]}
    if ((st == 0)) && grep -q '^test result: ok. [1-9][0-9]* passed; 0 failed' "$log" &&
        grep -q 'ERROR SUMMARY: 0 errors' "$log"; then
        echo "ok valgrind $name $*"
        echo "1 passed, 0 failed"
    else
        echo "FAILED valgrind $name $* (status $st; 99: memcheck found errors)"
        echo "0 passed, 1 failed"
    fi
    rm -f "$log"
}
# CQs, QPs and SRQs destroyed while other threads read and hold the events
# naming them.
part "valgrind: destroy while events are in flight" valgrind_tests rxe_faults \
    destroying_objects_while_their_events_are_read_and_held_on_another_thread --exact
# Every size, length and range the crate takes, with few cases.
part "valgrind: sizes" valgrind_tests rxe_sizes

summary="$passed passed, $failed failed"
((${#failed_parts[@]} == 0)) || echo "failed parts: ${failed_parts[*]}"
[[ -n $results ]] && echo "$summary" >"$results/summary"
echo "$summary"
((failed == 0))
