#!/usr/bin/env bash
# Benchmarks inside the rxe guest, C beside Rust (started by tests/rxe/bench.sh):
#   guest-bench.sh RC_PINGPONG ASYNC_LATENCY_RUST ASYNC_LATENCY_C
#
# 1. RC ping-pong rxe1 -> rxe0: ibv_rc_pingpong (C, rdma-core) against
#    rc_pingpong (Rust, examples/rc_pingpong.rs), same size and iterations,
#    busy polling and with -e (completion channel), in alternating rounds.
# 2. Asynchronous event delivery on link flaps of veth0: async_latency (C,
#    tests/rxe/async_latency.c) against async_latency (Rust,
#    examples/async_latency.rs), in alternating rounds.
# Prints a table of medians over the rounds with the Rust/C ratio, then
# "rxe benchmarks: done". Exits non-zero when a program failed.
#
# Environment: RXE_BENCH_ROUNDS (default 5), RXE_BENCH_ITERS (500),
# RXE_BENCH_SIZE (4096), RXE_BENCH_FLAPS (20).
set -uo pipefail

if [[ ${RXE_GUEST:-} != 1 ]]; then
    echo "guest-bench.sh runs inside the test VM; use tests/rxe/bench.sh" >&2
    exit 2
fi
(($# == 3)) || {
    echo "usage: guest-bench.sh RC_PINGPONG ASYNC_LATENCY_RUST ASYNC_LATENCY_C" >&2
    exit 2
}
rc_rust=$1
async_rust=$2
async_c=$3
rc_c=$(command -v ibv_rc_pingpong) || {
    echo "ibv_rc_pingpong not found (package ibverbs-utils)" >&2
    exit 2
}

rounds=${RXE_BENCH_ROUNDS:-5}
iters=${RXE_BENCH_ITERS:-500}
size=${RXE_BENCH_SIZE:-4096}
flaps=${RXE_BENCH_FLAPS:-20}
gid=${RXE_GID_INDEX:-1}
IFS=, read -r dev0 dev1 <<<"${RXE_DEVICES:-rxe0,rxe1}"
IFS=, read -r net0 _ <<<"${RXE_NETDEVS:-veth0,veth1}"
IFS=, read -r addr0 _ <<<"${RXE_ADDRS:-198.18.0.1,198.18.0.2}"
work=$(mktemp -d)
failures=()
declare -A samples=()

# add KEY VALUE: one more sample of KEY.
add() { samples[$1]+="$2 "; }

# listening PORT: a socket listens on TCP PORT (IPv4 or IPv6).
listening() {
    local hex local_addr state f
    printf -v hex '%04X' "$1"
    for f in /proc/net/tcp /proc/net/tcp6; do
        while read -r _ local_addr _ state _; do
            [[ $local_addr == *:"$hex" && $state == 0A ]] && return 0
        done <"$f"
    done
    return 1
}

port_active() {
    local state
    read -r state <"/sys/class/infiniband/$1/ports/1/state" 2>/dev/null && [[ $state == "4: ACTIVE" ]]
}

# wait_for SECONDS COMMAND...: poll every 0.05 s until COMMAND succeeds.
wait_for() {
    local n=$(($1 * 20))
    shift
    until "$@"; do
        ((n-- > 0)) || return 1
        sleep 0.05
    done
}

tcp_port=18515

# pingpong LANG MODE BINARY [ARGS...]: one server (rxe0) + client (rxe1) run;
# records usec/iter and Mbit/sec of the client.
pingpong() {
    local lang=$1 mode=$2 bin=$3 st cst line usec mbit
    shift 3
    tcp_port=$((tcp_port + 1))
    local args=(-g "$gid" -p "$tcp_port" -s "$size" -n "$iters" "$@")
    timeout -k 5 60 "$bin" -d "$dev0" "${args[@]}" >"$work/server" 2>&1 &
    local server=$!
    if ! wait_for 20 listening "$tcp_port"; then
        kill "$server" 2>/dev/null
    fi
    timeout -k 5 60 "$bin" -d "$dev1" "${args[@]}" "$addr0" >"$work/client" 2>&1
    cst=$?
    wait "$server"
    st=$?
    line=$(grep 'usec/iter' "$work/client")
    usec=$(sed -n 's/.* = \([0-9.]*\) usec\/iter$/\1/p' <<<"$line")
    mbit=$(grep 'Mbit/sec' "$work/client" | sed -n 's/.* = \([0-9.]*\) Mbit\/sec$/\1/p')
    if ((st != 0 || cst != 0)) || [[ -z $usec || -z $mbit ]]; then
        failures+=("$lang rc_pingpong $mode (server $st, client $cst)")
        echo "  $lang $mode: FAILED (server status $st, client status $cst)"
        sed 's/^/    server: /' "$work/server"
        sed 's/^/    client: /' "$work/client"
        return
    fi
    add "rc $mode usec $lang" "$usec"
    add "rc $mode mbit $lang" "$mbit"
    echo "  $lang $mode: $line"
}

restore_routes() {
    ip link set "$net0" up 2>/dev/null
    ip route replace 198.18.0.2 dev veth0 src 198.18.0.1 table 100 2>/dev/null
    ip route replace 198.18.0.1 dev veth1 src 198.18.0.2 table 101 2>/dev/null
}

# async LANG BINARY: one run of FLAPS link flaps.
async() {
    local lang=$1 bin=$2 st line
    timeout -k 5 120 "$bin" -d "$dev0" -i "$net0" -n "$flaps" >"$work/async" 2>&1
    st=$?
    restore_routes
    line=$(grep '^median_us ' "$work/async")
    if ((st != 0)) || [[ -z $line ]]; then
        failures+=("$lang async_latency (status $st)")
        echo "  $lang: FAILED (status $st)"
        sed 's/^/    /' "$work/async"
        return
    fi
    sed 's/^/  '"$lang"': /' "$work/async"
    # median_us read R ack A read_ack RA down_to_wake D up_to_wake U
    local _ read ack read_ack down up total
    read -r _ _ read _ ack _ read_ack _ down _ up <<<"$line"
    total=$(sed -n 's/^total_us_per_flap //p' "$work/async")
    add "async read_ack $lang" "$read_ack"
    add "async read $lang" "$read"
    add "async ack $lang" "$ack"
    add "async down $lang" "$down"
    add "async up $lang" "$up"
    add "async total $lang" "$total"
}

echo "rxe benchmarks: $rounds rounds; rc_pingpong $size B x $iters iters; $flaps link flaps per async run"
wait_for 20 port_active "$dev0" && wait_for 20 port_active "$dev1" || {
    echo "rxe ports not ACTIVE" >&2
    exit 1
}

for ((r = 1; r <= rounds; r++)); do
    echo "round $r"
    # Alternate which language goes first, so that neither always runs on a
    # warmer (or colder) guest.
    if ((r % 2)); then order=(C Rust); else order=(Rust C); fi
    for mode in poll events; do
        flag=()
        [[ $mode == events ]] && flag=(-e)
        for lang in "${order[@]}"; do
            if [[ $lang == C ]]; then bin=$rc_c; else bin=$rc_rust; fi
            pingpong "$lang" "$mode" "$bin" "${flag[@]}"
        done
    done
done

for ((r = 1; r <= rounds; r++)); do
    echo "async round $r"
    if ((r % 2)); then order=(C Rust); else order=(Rust C); fi
    for lang in "${order[@]}"; do
        if [[ $lang == C ]]; then bin=$async_c; else bin=$async_rust; fi
        async "$lang" "$bin"
    done
done
restore_routes
wait_for 20 port_active "$dev0"

# The table: median over the rounds of each figure, and Rust/C.
table() {
    local key label unit c rust
    printf '%-44s %-10s %10s %10s %7s  %-19s %s\n' "benchmark (median of $rounds rounds)" unit C Rust Rust/C \
        "C min..max" "Rust min..max"
    while IFS='|' read -r key label unit; do
        c=${samples["$key C"]:-}
        rust=${samples["$key Rust"]:-}
        awk -v label="$label" -v unit="$unit" -v c="$c" -v r="$rust" '
            # Sorts the samples of s into a[1..n]; returns n.
            function sorted(s, a,   n, i, j, t) {
                n = split(s, a, " ")
                for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                    if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
                return n
            }
            function med(s,   a, n) {
                n = sorted(s, a)
                if (n == 0) return ""
                return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
            }
            function range(s,   a, n) {
                n = sorted(s, a)
                return n == 0 ? "-" : sprintf("%.1f..%.1f", a[1], a[n])
            }
            BEGIN {
                mc = med(c); mr = med(r)
                ratio = (mc != "" && mr != "" && mc + 0 > 0) ? sprintf("%.2f", mr / mc) : "-"
                printf "%-44s %-10s %10s %10s %7s  %-19s %s\n", label, unit,
                    mc == "" ? "-" : sprintf("%.2f", mc), mr == "" ? "-" : sprintf("%.2f", mr),
                    ratio, range(c), range(r)
            }'
    done <<EOF
rc poll usec|rc_pingpong ${size} B, busy poll|usec/iter
rc poll mbit|rc_pingpong ${size} B, busy poll|Mbit/sec
rc events usec|rc_pingpong ${size} B, -e (completion channel)|usec/iter
rc events mbit|rc_pingpong ${size} B, -e (completion channel)|Mbit/sec
async read_ack|async event: poll wake -> read + acked|usec
async read|async event: poll wake -> read|usec
async ack|async event: acknowledge|usec
async down|link down request -> poll wake|usec
async up|link up request -> poll wake|usec
async total|link down + up, wall time per flap|usec/flap
EOF
}

echo
echo "=== results"
table | tee "$work/table"
cat <<'EOF'
Method: rc_pingpong figures are the client's final lines (ibv_rc_pingpong's
format). Async events: one program per language opens rxe0, switches veth0
down and up with one rtnetlink request per change (no fork), waits on the
async fd with poll() and takes CLOCK_MONOTONIC at the wake-up, after
ibv_get_async_event (Rust: Context::try_get_async_event, which also resolves
the element) and after ibv_ack_async_event (Rust: AsyncEvent::ack); medians
per run over every event (PORT_ERR, then PORT_ACTIVE once or more per flap),
then the median of those over the rounds. "request -> poll wake" covers the
kernel's link change and event delivery: the same kernel code for both, so
its spread shows how noisy the guest is.
EOF
echo "=== end"
if [[ -n ${RXE_RESULTS:-} ]]; then
    cp "$work/table" "$RXE_RESULTS/bench-table"
fi
rm -rf "$work"
if ((${#failures[@]})); then
    for f in "${failures[@]}"; do echo "FAILED $f"; done
    echo "rxe benchmarks: ${#failures[@]} program run(s) failed"
    exit 1
fi
echo "rxe benchmarks: done"
