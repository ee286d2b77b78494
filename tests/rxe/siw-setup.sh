#!/usr/bin/env bash
# Sourced by guest-all.sh inside the guest: loads soft-iWARP (siw.ko, built
# on the host by build-siw.sh and named by SIW_KO) and creates siw0 and siw1
# on a second veth pair, veth2 (198.18.2.1) and veth3 (198.18.2.2), with the
# same policy routing as rxe's pair, so that rdma_cm resolves each address to
# exactly one device (rxe0/rxe1 keep 198.18.0.x).
#   siw_setup    -> 0 when both devices are ACTIVE; prints why not otherwise

SIW_ADDRS=198.18.2.1,198.18.2.2

siw_setup() {
    if [[ -z ${SIW_KO:-} || ! -f $SIW_KO ]]; then
        echo "siw: no module (SIW_KO=${SIW_KO:-unset}): tests/rxe/build-siw.sh builds it on the host"
        return 1
    fi
    modprobe -a libcrc32c crc32c_generic 2>/dev/null
    if ! grep -q '^siw ' /proc/modules; then
        insmod "$SIW_KO" || { echo "siw: insmod $SIW_KO failed"; return 1; }
    fi
    ip -batch - <<'IPEOF' || { echo "siw: network setup failed"; return 1; }
link add veth2 type veth peer name veth3
addr add 198.18.2.1/24 dev veth2
addr add 198.18.2.2/24 dev veth3
link set veth2 up
link set veth3 up
rule add pref 11 iif lo to 198.18.2.2 table 102
route add 198.18.2.2 dev veth2 src 198.18.2.1 table 102
rule add pref 11 iif lo to 198.18.2.1 table 103
route add 198.18.2.1 dev veth3 src 198.18.2.2 table 103
IPEOF
    local c
    for c in veth2 veth3; do
        echo 1 >/proc/sys/net/ipv4/conf/$c/accept_local
        echo 0 >/proc/sys/net/ipv4/conf/$c/rp_filter
    done
    rdma link add siw0 type siw netdev veth2 || { echo "siw: rdma link add siw0 failed"; return 1; }
    rdma link add siw1 type siw netdev veth3 || { echo "siw: rdma link add siw1 failed"; return 1; }
    local n=0 s0 s1
    while :; do
        read -r s0 </sys/class/infiniband/siw0/ports/1/state 2>/dev/null || s0=
        read -r s1 </sys/class/infiniband/siw1/ports/1/state 2>/dev/null || s1=
        [[ $s0 == "4: ACTIVE" && $s1 == "4: ACTIVE" ]] && return 0
        n=$((n + 1))
        if ((n >= 100)); then
            echo "siw: ports not ACTIVE (siw0: $s0, siw1: $s1)"
            return 1
        fi
        sleep 0.1
    done
}

# Checks of the siw devices themselves: iWARP transport, active ports, a
# link change seen as an async event.
siw_smoke() {
    local p=0 f=0 out
    check() {
        local desc=$1
        shift
        if "$@"; then p=$((p + 1)); echo "ok $desc"; else f=$((f + 1)); echo "FAILED $desc"; fi
    }
    out=$(ibv_devinfo -d siw0 2>&1)
    echo "$out" | sed 's/^/    /' | head -20
    check "siw0 is an iWARP device" grep -q 'transport:.*iWARP' <<<"$out"
    check "siw0 port 1 is active" grep -q 'state:.*PORT_ACTIVE' <<<"$out"
    check "ibv_devices lists siw0 and siw1" bash -c 'ibv_devices | grep -q siw0 && ibv_devices | grep -q siw1'
    check "fi_info -p verbs lists siw0" bash -c 'FI_PROVIDER=verbs fi_info -p verbs 2>/dev/null | grep -q "domain: siw0"'
    echo "$p passed, $f failed"
}
