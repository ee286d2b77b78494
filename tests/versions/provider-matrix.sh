#!/usr/bin/env bash
# Runs the libfabric suite on every provider a stock libfabric gives without
# hardware, one provider at a time (LIBFABRIC_TEST_PROVIDER):
#   tcp;ofi_rxm, udp;ofi_rxd, shm, sockets   (tcp itself runs in the host tests)
# Tests a provider cannot do print "SKIP <test>: provider <p>: <why>"; they
# are counted apart. Prints one line per provider, then "N passed, N failed".
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
# tcp;ofi_rxm by design and run in the host tests.
bins=$(cargo test -p libfabric-safe --features tokio --tests --no-run 2>&1 |
    sed -n 's/^ *Executable .*(\(.*\))$/\1/p' |
    grep -v -e '/compile_fail-' -e '/sizes-' -e '/lost_wakeup-')
if [[ -z $bins ]]; then
    echo "provider matrix: the test binaries did not build"
    echo "0 passed, 1 failed"
    exit 1
fi

total_p=0 total_f=0 total_s=0
failed_providers=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for prov in "${providers[@]}"; do
    if ! fi_info -p "$prov" >/dev/null 2>&1; then
        echo "provider $prov: not offered by this libfabric (fi_info -p $prov)"
        total_f=$((total_f + 1))
        failed_providers+=("$prov")
        continue
    fi
    p=0 f=0 s=0 bad=()
    for bin in $bins; do
        # The progress lock's model calls no provider: it runs once, in the
        # host tests.
        LIBFABRIC_TEST_PROVIDER=$prov timeout -k 10 300 "$bin" --test-threads=1 --nocapture \
            --skip progress::model >"$log" 2>&1 </dev/null
        st=$?
        bp=0 bf=0 results=0
        while read -r a b; do
            bp=$((bp + a))
            bf=$((bf + b))
            results=$((results + 1))
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
            echo "--- provider $prov: ${bin##*/} failed (status $st):"
            grep -E "^test .*FAILED|panicked at|^thread .* panicked" -A2 "$log" | head -30
        fi
        grep -o 'SKIP [A-Za-z0-9_]*: provider .*' "$log" | sort -u | sed 's/^/    /'
    done
    echo "provider $prov: $p passed, $f failed, $s skipped${bad:+ (failed: ${bad[*]})}"
    total_p=$((total_p + p))
    total_f=$((total_f + f))
    total_s=$((total_s + s))
    ((f == 0)) || failed_providers+=("$prov")
done
((${#failed_providers[@]} == 0)) || say "failed providers: ${failed_providers[*]}"
echo "skipped (typed, printed above): $total_s"
echo "$total_p passed, $total_f failed"
((total_f == 0))
