#!/usr/bin/env bash
# Smoke test of the rxe test bed. Runs inside the guest:
#   tests/rxe/vm.sh run "$PWD/tests/rxe/guest-smoke.sh"
# Prints "ok NAME" / "FAILED NAME" per check and ends with "N passed, N failed".
set -uo pipefail

if [[ ${RXE_GUEST:-} != 1 ]]; then
    echo "guest-smoke.sh runs inside the test VM: tests/rxe/vm.sh run \"\$PWD/tests/rxe/guest-smoke.sh\"" >&2
    exit 2
fi

IFS=, read -r dev0 dev1 <<<"${RXE_DEVICES:-rxe0,rxe1}"
IFS=, read -r net0 _ <<<"${RXE_NETDEVS:-veth0,veth1}"
IFS=, read -r addr0 _ <<<"${RXE_ADDRS:-198.18.0.1,198.18.0.2}"
work=$(mktemp -d)
passed=0
failed=0

pass() { echo "ok $1"; passed=$((passed + 1)); }
fail() { echo "FAILED $1${2:+ ($2)}"; failed=$((failed + 1)); }
# Print a captured log indented, so it reads as part of the check above it.
show() { [[ -s $1 ]] && sed 's/^/    /' "$1"; return 0; }

# Index of the IPv4-mapped RoCE v2 GID of port 1 of device $1. rxe has 1024
# GID slots and forks are slow here, so read the first few with builtins.
gid_index() {
    local dev=$1 i gid type
    for i in 0 1 2 3 4 5 6 7; do
        read -r gid <"/sys/class/infiniband/$dev/ports/1/gids/$i" 2>/dev/null || continue
        read -r type <"/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$i" 2>/dev/null || type=
        if [[ $gid == 0000:0000:0000:0000:0000:ffff:* && $type == "RoCE v2" ]]; then
            echo "$i"
            return 0
        fi
    done
    return 1
}

port_active() {
    local state
    read -r state <"/sys/class/infiniband/$1/ports/1/state" 2>/dev/null && [[ $state == "4: ACTIVE" ]]
}

# wait_for SECONDS COMMAND...: poll every 0.1 s until COMMAND succeeds.
wait_for() {
    local n=$(($1 * 10))
    shift
    until "$@"; do
        ((n-- > 0)) || return 1
        sleep 0.1
    done
}

# listening PORT: some socket listens on TCP PORT (read from /proc/net/tcp).
listening() {
    local hex local_addr state
    printf -v hex '%04X' "$1"
    while read -r _ local_addr _ state _; do
        [[ $local_addr == *:"$hex" && $state == 0A ]] && return 0
    done </proc/net/tcp
    return 1
}

file_has() { [[ -f $1 && $(<"$1") == *"$2"* ]]; }

# --- devices -----------------------------------------------------------------
out=$(timeout 30 ibv_devices 2>&1)
if [[ $out == *"$dev0"* && $out == *"$dev1"* ]]; then pass ibv_devices; else
    echo "$out"
    fail ibv_devices "$dev0 and $dev1 not both listed"
fi

timeout 30 ibv_devinfo -d "$dev0" >"$work/devinfo" 2>&1
if file_has "$work/devinfo" PORT_ACTIVE && file_has "$work/devinfo" Ethernet; then
    pass ibv_devinfo
else
    show "$work/devinfo"
    fail ibv_devinfo "port not PORT_ACTIVE on Ethernet"
fi

if [[ -c /dev/infiniband/rdma_cm && -c /dev/infiniband/uverbs0 ]]; then pass device-nodes; else
    fail device-nodes "/dev/infiniband/rdma_cm or uverbs0 missing"
fi

# --- GID index ---------------------------------------------------------------
if gid0=$(gid_index "$dev0") && gid1=$(gid_index "$dev1"); then
    echo "    IPv4-mapped GID index: $dev0 $gid0, $dev1 $gid1"
    pass gid-index
else
    gid0=1 gid1=1
    fail gid-index "no IPv4-mapped RoCE v2 GID in the first 8 slots"
fi

# --- RC pingpong rxe0 <-> rxe1 -------------------------------------------------
port=18515
timeout -k 5 60 ibv_rc_pingpong -d "$dev0" -g "$gid0" -p "$port" -n 20 -s 4096 >"$work/server" 2>&1 &
server=$!
wait_for 20 listening "$port"
client_ok=0
timeout -k 5 60 ibv_rc_pingpong -d "$dev1" -g "$gid1" -p "$port" -n 20 -s 4096 "$addr0" >"$work/client" 2>&1 &&
    client_ok=1
wait "$server"
server_st=$?
if [[ $client_ok == 1 && $server_st == 0 ]] && file_has "$work/client" "iters in"; then
    grep -h 'iters in' "$work/client" | sed 's/^/    /'
    pass rc_pingpong
else
    echo "    server (status $server_st):"
    show "$work/server"
    echo "    client:"
    show "$work/client"
    fail rc_pingpong
fi

# --- async events on link down / up -------------------------------------------
timeout -k 5 60 stdbuf -oL ibv_asyncwatch -d "$dev0" >"$work/async" 2>&1 &
watcher=$!
if wait_for 20 file_has "$work/async" "async event FD"; then
    ip link set "$net0" down
    wait_for 10 file_has "$work/async" PORT_ERR
    ip link set "$net0" up
    wait_for 10 file_has "$work/async" PORT_ACTIVE
fi
kill "$watcher" 2>/dev/null
wait "$watcher" 2>/dev/null
if file_has "$work/async" PORT_ERR && file_has "$work/async" PORT_ACTIVE; then
    grep -h event_type "$work/async"
    pass async-events
else
    show "$work/async"
    fail async-events "PORT_ERR and PORT_ACTIVE expected"
fi
# Leave the port usable for whatever runs next.
wait_for 20 port_active "$dev0" || fail port-active-again

# --- libfabric -----------------------------------------------------------------
if command -v fi_info >/dev/null; then
    timeout 60 fi_info -p verbs >"$work/fi_info" 2>&1
    if file_has "$work/fi_info" "$dev0"; then pass fi_info-verbs; else
        show "$work/fi_info"
        fail fi_info-verbs "$dev0 not listed by the verbs provider"
    fi
fi

# verbs MSG endpoints connect through rdma_cm (/dev/infiniband/rdma_cm).
if command -v fi_pingpong >/dev/null; then
    fi_port=47592
    timeout -k 5 60 fi_pingpong -p verbs -e msg -d "$dev0" -B "$fi_port" -I 20 -S 1024 \
        >"$work/fi_server" 2>&1 &
    server=$!
    wait_for 20 listening "$fi_port"
    client_ok=0
    timeout -k 5 60 fi_pingpong -p verbs -e msg -d "$dev1" -P "$fi_port" -I 20 -S 1024 "$addr0" \
        >"$work/fi_client" 2>&1 && client_ok=1
    wait "$server"
    server_st=$?
    if [[ $client_ok == 1 && $server_st == 0 ]]; then
        show "$work/fi_client"
        pass fi_pingpong-verbs-msg
    else
        echo "    server (status $server_st):"
        show "$work/fi_server"
        echo "    client:"
        show "$work/fi_client"
        fail fi_pingpong-verbs-msg
    fi
fi

rm -rf "$work"
summary="$passed passed, $failed failed"
[[ -n ${RXE_RESULTS:-} ]] && echo "$summary" >"$RXE_RESULTS/summary"
echo "$summary"
((failed == 0))
