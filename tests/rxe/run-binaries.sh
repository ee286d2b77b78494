#!/usr/bin/env bash
# Runs Rust test executables (from `cargo test --no-run`) inside the rxe guest:
#   tests/rxe/vm.sh run "$PWD/tests/rxe/run-binaries.sh" BINARY... [-- TEST-ARGS...]
# Each binary runs with --test-threads=1 plus TEST-ARGS, under a timeout of
# RXE_TEST_TIMEOUT seconds (default 300). libtest's "test result:" lines are
# summed into a final "N passed, N failed" line; a binary that crashes, times
# out or fails without such a line counts as one failure.
set -uo pipefail

usage() {
    echo "usage: run-binaries.sh BINARY... [-- TEST-ARGS...]" >&2
    exit 2
}

bins=()
while (($#)); do
    if [[ $1 == -- ]]; then
        shift
        break
    fi
    bins+=("$1")
    shift
done
test_args=("$@")
((${#bins[@]})) || usage

limit=${RXE_TEST_TIMEOUT:-300}
log=$(mktemp)
passed=0
failed=0
problems=()

for bin in "${bins[@]}"; do
    name=${bin##*/}
    if [[ ! -x $bin ]]; then
        echo "run-binaries: not an executable: $bin"
        failed=$((failed + 1))
        problems+=("$name: not found")
        continue
    fi
    echo "run-binaries: $name"
    timeout -k 10 "$limit" "$bin" --test-threads=1 "${test_args[@]}" 2>&1 </dev/null | tee "$log"
    st=${PIPESTATUS[0]}
    # Finish a line the binary left open (e.g. "test foo ... " before a crash).
    [[ -s $log && $(tail -c 1 "$log") != "" ]] && echo

    # "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; ..."
    p=0 f=0 results=0
    re='^test result: [A-Za-z]+\. ([0-9]+) passed; ([0-9]+) failed;'
    while IFS= read -r line; do
        if [[ $line =~ $re ]]; then
            p=$((p + BASH_REMATCH[1]))
            f=$((f + BASH_REMATCH[2]))
            results=$((results + 1))
        fi
    done <"$log"

    if ((st == 124 || st == 137)); then
        problems+=("$name: timed out after $limit s")
        ((f > 0)) || f=1
    elif ((st > 128)); then
        problems+=("$name: killed by signal $((st - 128))")
        ((f > 0)) || f=1
    elif ((st != 0)); then
        if ((f > 0)); then
            problems+=("$name: $f failed")
        else
            problems+=("$name: exit status $st")
            f=1
        fi
    elif ((results == 0)); then
        echo "run-binaries: $name printed no 'test result:' line"
    fi
    passed=$((passed + p))
    failed=$((failed + f))
done
rm -f "$log"

for p in "${problems[@]}"; do
    echo "FAILED $p"
done
summary="$passed passed, $failed failed"
[[ -n ${RXE_RESULTS:-} ]] && echo "$summary" >"$RXE_RESULTS/summary"
echo "$summary"
((failed == 0))
