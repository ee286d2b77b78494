#!/usr/bin/env bash
# Runs the host test binaries under valgrind's memcheck and fails on any
# memory error or definitely/indirectly lost block:
#   - every test binary of the libfabric crate (all features; the
#     compile-fail suite is left out: it runs the compiler, not our code);
#   - the root package's panics, faults and load tests, with small counts;
#   - the pingpong example, in each completion mode, with few iterations.
# One line per binary, then "N passed, N failed"; the exit status is 0 only
# if every binary passed. Logs go to target/valgrind/ (VALGRIND_LOG_DIR).
#
# Usage: tests/valgrind/run.sh
# The counts of the root tests can be changed through LOAD_EQ_EVENTS,
# LOAD_CQ_COMPLETIONS, FAULTS_CONNECTIONS and FAULTS_KILL_AFTER.
set -euo pipefail
cd "$(dirname "$0")/../.."

SUPP=tests/valgrind/libfabric.supp
LOG_DIR=${VALGRIND_LOG_DIR:-target/valgrind}
PER_BINARY_TIMEOUT=${VALGRIND_TIMEOUT:-600}

say() { printf '==> %s\n' "$*"; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

if ! command -v valgrind >/dev/null; then
    if ! command -v apt-get >/dev/null; then
        echo "error: valgrind is not installed and there is no apt-get to install it" >&2
        exit 1
    fi
    say "installing valgrind"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi
if [ -f "$HOME/.cargo/env" ] && ! command -v cargo >/dev/null; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi
command -v cargo >/dev/null || { echo "error: cargo was not found (https://rustup.rs)" >&2; exit 1; }

mkdir -p "$LOG_DIR"
start_all=$SECONDS

# Prints "name<TAB>executable" for each artifact cargo built, from its JSON
# messages on stdin. $1: the artifact kind to keep (test or example).
executables() {
    local kind=$1 line name exe profile
    while IFS= read -r line; do
        case $line in
        *'"reason":"compiler-artifact"'*'"executable":"'*) ;;
        *) continue ;;
        esac
        profile=${line#*\"profile\":\{}
        profile=${profile%%\}*}
        case $kind in
        # Test harnesses: the profile says "test" (the target's own "test"
        # flag only says whether `cargo test` would build it).
        test) case $profile in *'"test":true'*) ;; *) continue ;; esac ;;
        example) case $line in *'"kind":["example"]'*) ;; *) continue ;; esac ;;
        esac
        name=${line#*\"target\":\{}
        name=${name#*\"name\":\"}
        name=${name%%\"*}
        exe=${line##*\"executable\":\"}
        exe=${exe%%\"*}
        printf '%s\t%s\n' "$name" "$exe"
    done
}

say "building the libfabric test binaries"
LIB_BINS=$(cargo test -p libfabric-safe --all-features --no-run --message-format=json-render-diagnostics |
    executables test)
say "building the root package's panics, faults and load tests"
ROOT_BINS=$(cargo test -p rdma-events-suite --test panics --test faults --test load --no-run \
    --message-format=json-render-diagnostics | executables test)
say "building the pingpong example"
if PINGPONG=$(cargo build --example pingpong --message-format=json-render-diagnostics 2>"$LOG_DIR/pingpong.build.log" |
    executables example | cut -f2) && [ -n "$PINGPONG" ]; then
    :
else
    PINGPONG=
    say "pingpong: the example does not build (see $LOG_DIR/pingpong.build.log); left out"
fi

PASSED=0
FAILED=0
FAILED_NAMES=()

# run_one NAME COMMAND...: runs COMMAND under memcheck, prints one line.
# Fair scheduling: valgrind runs one thread at a time, and by default a
# thread that spins (a test's reader polling a queue while another thread
# closes an endpoint) may keep the others waiting for seconds; with the
# lock handed round in turn the suite takes minutes less.
run_one() {
    local name=$1
    shift
    local out="$LOG_DIR/$name.out" vg="$LOG_DIR/$name.vg.log" start=$SECONDS rc=0
    timeout "$PER_BINARY_TIMEOUT" valgrind --tool=memcheck --fair-sched=yes --error-exitcode=99 \
        --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --show-leak-kinds=definite,indirect --suppressions="$SUPP" \
        --num-callers=40 --log-file="$vg" "$@" >"$out" 2>&1 || rc=$?
    local took=$((SECONDS - start))
    local tests errors lost
    tests=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 passed, \2 failed/p' "$out" | tail -1)
    errors=$(sed -n 's/^==[0-9]*== ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$vg" | tail -1)
    lost=$(sed -n 's/^==[0-9]*==    \(definitely\|indirectly\) lost: \(.*\)/\1 lost: \2/p' "$vg" | paste -sd';' -)
    if [ "$rc" -eq 0 ]; then
        printf 'PASS %-24s %s; %s valgrind errors; %s s\n' "$name" "${tests:-ran}" "${errors:-0}" "$took"
        return
    fi
    local why
    case $rc in
    99) why="$errors valgrind error(s) (${lost:-no leaks})" ;;
    124) why="timed out after $PER_BINARY_TIMEOUT s" ;;
    *) why="exit status $rc${tests:+ (tests: $tests)}" ;;
    esac
    printf 'FAIL %-24s %s; %s s; logs %s, %s\n' "$name" "$why" "$took" "$out" "$vg"
    # The test harness's own failure reports (a failed assertion), if any.
    awk '/^failures:$/ { on = 1 } on { print "     " $0 } /^test result:/ { on = 0 }' "$out" | head -40
    # The first error valgrind reported, for a quick look.
    awk '/^==[0-9]+== ([0-9,]+ bytes in .* lost in loss record|Invalid|Conditional jump|Use of uninitialised|Mismatched|Syscall param|Source and destination overlap)/ {p=1}
         p && /^==[0-9]+== $/ {exit}
         p {print "     " $0}' "$vg" | head -25
}

# Property tests: a few cases each under valgrind (256 on the host).
export PROPTEST_CASES=${PROPTEST_CASES:-16}
# The lost wake-up runs: one short run each (50 run natively against
# libfabric 1.22 and 2.x).
export LOST_WAKEUP_REPS=${LOST_WAKEUP_REPS:-1} LOST_WAKEUP_EVENTS=${LOST_WAKEUP_EVENTS:-500}
# The concurrent event queue readers: 20,000 events (200,000 natively).
export EQ_READERS_EVENTS=${EQ_READERS_EVENTS:-20000}
# The runs, queued here and run three at a time below (VALGRIND_JOBS):
# valgrind runs one thread of a process at a time, and the tests wait on
# their peers part of it; three kept two cores busy (91 s with two at a
# time, 74 s with three).
# NAMES[i] is the run's name, JOBS[i] run_one's arguments, quoted.
NAMES=()
JOBS=()
queue() {
    local args
    printf -v args '%q ' "$@"
    NAMES+=("$1")
    JOBS+=("$args")
}
while IFS=$'\t' read -r name exe; do
    [ -n "$name" ] || continue
    [ "$name" = compile_fail ] && continue
    # The library's own unit tests are named after the crate. The model of
    # the progress lock's protocol calls no C and would take many minutes
    # under valgrind: it runs natively in the host tests.
    if [ "$name" = libfabric ]; then
        queue "libfabric-unit" "$exe" --test-threads=1 --skip progress::model
        continue
    fi
    queue "libfabric-$name" "$exe" --test-threads=1
done <<<"$LIB_BINS"

export LOAD_EQ_EVENTS=${LOAD_EQ_EVENTS:-20000}
export LOAD_CQ_COMPLETIONS=${LOAD_CQ_COMPLETIONS:-5000}
export FAULTS_CONNECTIONS=${FAULTS_CONNECTIONS:-30}
export FAULTS_KILL_AFTER=${FAULTS_KILL_AFTER:-2000}
while IFS=$'\t' read -r name exe; do
    [ -n "$name" ] || continue
    queue "$name" "$exe" --test-threads=1
done <<<"$ROOT_BINS"

if [ -n "$PINGPONG" ]; then
    for mode in spin sread fd tokio; do
        queue "pingpong-$mode" "$PINGPONG" -I 20 -S 64,4096 -v -c "$mode"
    done
    queue "pingpong-rdm" "$PINGPONG" -e rdm -I 20 -S 64 -v
fi

say "running under valgrind, ${VALGRIND_JOBS:-3} at a time (suppressions: $SUPP, logs: $LOG_DIR)"
# A signal that ends this script also stops the runs under way.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
. tests/parallel.sh
reports="$LOG_DIR/reports"
rm -rf "$reports"
mkdir -p "$reports"
run_index() { eval "run_one ${JOBS[$1]}"; }
in_parallel "${VALGRIND_JOBS:-3}" "$reports" "${#JOBS[@]}" run_index
# The reports in the order the runs were queued.
for i in "${!JOBS[@]}"; do
    cat "$reports/$i"
    if [ "$(head -c 5 "$reports/$i")" = "PASS " ]; then
        PASSED=$((PASSED + 1))
    else
        FAILED=$((FAILED + 1))
        FAILED_NAMES+=("${NAMES[$i]}")
    fi
done
rm -rf "$reports"

say "valgrind run took $((SECONDS - start_all)) s"
[ "$FAILED" -eq 0 ] || say "failed: ${FAILED_NAMES[*]}"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
