#!/usr/bin/env bash
# Runs the libfabric suite on every provider a stock libfabric gives without
# hardware, each in processes of its own (LIBFABRIC_TEST_PROVIDER):
#   tcp;ofi_rxm, udp;ofi_rxd, shm, sockets   (tcp itself runs in the host tests)
# Given by name, tcp runs too, with sizes (tied to it), and
# tcp/lost_wakeup runs that test alone, beside the others (its runs as
# LOST_WAKEUP_REPS says): ./run test does so for the other versions.
# Tests a provider cannot do print "SKIP <test>: provider <p>: <why>"; they
# are counted apart. Prints one line per provider, then "N passed, N failed".
# The jobs run side by side (MATRIX_JOBS=1: one at a time).
#
#   tests/versions/provider-matrix.sh [PROVIDER...]
#
# Works against another libfabric through PKG_CONFIG_PATH / LD_LIBRARY_PATH
# and CARGO_TARGET_DIR (as ./run test does for 1.22).
set -uo pipefail
cd "$(dirname "$0")/../.."

providers=("$@")
((${#providers[@]})) || providers=("tcp;ofi_rxm" "udp;ofi_rxd" "shm" "sockets")

say() { printf '==> %s\n' "$*"; }

# The suite's test binaries, built once. The compile-fail suite runs the
# compiler, not a provider; sizes and lost_wakeup are tied to tcp and
# tcp;ofi_rxm by design: sizes runs with tcp, lost_wakeup as its own job.
all_bins=$(cargo test -p libfabric-safe --features tokio --tests --no-run 2>&1 |
    sed -n 's/^ *Executable .*(\(.*\))$/\1/p' | grep -v -e '/compile_fail-')
bins=$(grep -v -e '/sizes-' -e '/lost_wakeup-' <<<"$all_bins")
if [[ -z $bins ]]; then
    echo "provider matrix: the test binaries did not build"
    echo "0 passed, 1 failed"
    exit 1
fi

# shm names a process's regions after its pid ("PID:N:M" in /dev/shm) and
# unlinks them at the endpoint's close. A process that ends without closing
# its endpoints (a peer process killed at the end of its test, a test that
# forgets an endpoint on purpose) leaves its regions behind, and when its
# pid comes round again (pid_max is 32768 here; a run starts tens of
# thousands of processes), shm finds the region of a live process under
# the new endpoint's name and refuses its fi_enable with -FI_EBUSY
# (smr_retry_map, prov/util/src/util_shm.c 150-187 in 1.17). Removed
# before each binary: the regions of processes that no longer exist.
remove_dead_shm_regions() {
    local f pid
    for f in /dev/shm/[0-9]*:*; do
        [[ -e $f ]] || continue
        pid=${f#/dev/shm/}
        pid=${pid%%:*}
        [[ -d /proc/$pid ]] || rm -f "$f"
    done
}

# One provider's run, its test binaries' output kept in the file LOG: its
# report on stdout, ending with the line
# "provider P: N passed, N failed, N skipped".
run_provider() {
    local job=$1 log=$2 p=0 f=0 s=0 bad=() bin st bp bf bs a b these
    local prov=${job%%/*}
    case $job in
    */*) these=$(grep -e "/${job#*/}-" <<<"$all_bins") ;;
    tcp) these=$(grep -v -e '/lost_wakeup-' <<<"$all_bins") ;;
    *) these=$bins ;;
    esac
    if ! fi_info -p "$prov" >/dev/null 2>&1; then
        echo "provider $job: not offered by this libfabric (fi_info -p $prov)"
        echo "provider $job: 0 passed, 1 failed, 0 skipped"
        return
    fi
    for bin in $these; do
        remove_dead_shm_regions
        # The progress lock's model calls no provider: it runs once, in the
        # host tests.
        LIBFABRIC_TEST_PROVIDER=$prov timeout -k 10 300 "$bin" --test-threads=1 --nocapture \
            --skip progress::model >"$log" 2>&1 </dev/null
        st=$?
        bp=0 bf=0
        while read -r a b; do
            bp=$((bp + a))
            bf=$((bf + b))
        done < <(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$log")
        if ((st != 0 && bf == 0)); then
            bf=1 # crashed or timed out without a result line
        fi
        bs=$(grep -o 'SKIP [A-Za-z0-9_]*: provider' "$log" | wc -l)
        p=$((p + bp - bs))
        s=$((s + bs))
        f=$((f + bf))
        if ((bf > 0)); then
            bad+=("${bin##*/}")
            echo "--- provider $job: ${bin##*/} failed (status $st):"
            grep -E "^test .*FAILED|panicked at|^thread .* panicked" -A2 "$log" | head -30
        fi
        grep -o 'SKIP [A-Za-z0-9_]*: provider .*' "$log" | sort -u | sed 's/^/    /'
        # The lost wake-up runs' counts, for the report.
        grep -o '[A-Za-z +]*: [0-9]* lost wake-ups in .*' "$log" | sed 's/^ */    /'
    done
    echo "provider $job: $p passed, $f failed, $s skipped${bad:+ (failed: ${bad[*]})}"
}

# Every job at once (MATRIX_JOBS: at most that many), each in processes of
# its own (the tests bind ephemeral ports and name shm endpoints after
# their process). Each binary runs its tests one at a time, and they spend
# most of it waiting (for a peer, a timeout, a close): the four providers
# two at a time kept two cores half busy (103 s of wall time, 105 s of
# CPU); all four at once take 67 s. The reports are printed in the jobs'
# order.
#
# Everything a run writes is under $reports, removed on any exit: a
# signal that ends this script also stops the provider runs under way (a
# test binary in flight ends by its own timeout), as it stops the loop of
# a single run.
. tests/parallel.sh
reports=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$reports"' EXIT
run_index() { run_provider "${providers[$1]}" "$reports/$1.log"; }
in_parallel "${MATRIX_JOBS:-${#providers[@]}}" "$reports" "${#providers[@]}" run_index

total_p=0 total_f=0 total_s=0
failed_providers=()
for i in "${!providers[@]}"; do
    cat "$reports/$i"
    read -r p f s < <(sed -n 's/^provider .*: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped.*/\1 \2 \3/p' \
        "$reports/$i" | tail -n 1) || true
    if [[ -z ${p:-} ]]; then
        echo "provider ${providers[$i]}: no report"
        p=0 f=1 s=0
    fi
    total_p=$((total_p + p))
    total_f=$((total_f + f))
    total_s=$((total_s + s))
    ((f == 0)) || failed_providers+=("${providers[$i]}")
done
((${#failed_providers[@]} == 0)) || say "failed providers: ${failed_providers[*]}"
echo "skipped (typed, printed above): $total_s"
echo "$total_p passed, $total_f failed"
((total_f == 0))
