#!/usr/bin/env bash
# Soft-RoCE (rxe) test bed: boots Debian's kernel under qemu (TCG, no KVM
# needed) with the host's root file system shared read-only, creates two rxe
# devices on a veth pair inside the guest and runs a script there.
#
#   vm.sh prepare                     install packages, fetch kernel, build initramfs
#   vm.sh run GUEST_SCRIPT [ARGS...]  boot the guest and run GUEST_SCRIPT in it
#
# See README.md next to this file for the environment variables.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=$repo/target/rxe-vm
stamp=$cache/stamp

# Debian packages the host needs: qemu and busybox to boot, kmod and cpio to
# build the initramfs, xz to unpack the kernel; the rest is used inside the
# guest, which runs the host's own binaries.
packages=(qemu-system-x86 busybox-static kmod cpio xz-utils gzip iproute2
    rdma-core ibverbs-providers ibverbs-utils libibverbs-dev libfabric-bin)

# Modules the initramfs loads (with their dependencies) to reach the host's
# root file system: virtio PCI, 9p over virtio, overlayfs.
initrd_modules=(virtio_pci 9pnet_virtio 9p overlay)

say() { printf 'rxe-vm: %s\n' "$*"; }
die() { printf 'rxe-vm: error: %s\n' "$*" >&2; exit 1; }

usage() {
    cat <<EOF
usage: $0 prepare
       $0 run GUEST_SCRIPT [ARGS...]
EOF
    exit 2
}

# Microseconds since the epoch, from bash's own clock.
now_us() { local t=${EPOCHREALTIME/./}; printf '%s' "$t"; }
# Format a duration in microseconds as seconds with one decimal.
fmt_us() { local cs=$(( $1 / 100000 )); printf '%d.%d s' $((cs / 10)) $((cs % 10)); }

apt_updated=0
apt_update() {
    if [[ $apt_updated == 0 ]]; then
        say "apt-get update"
        apt-get update -qq
        apt_updated=1
    fi
}

install_packages() {
    local missing=() pkg
    declare -A state=()
    while read -r pkg st; do
        state[$pkg]=$st
    done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "${packages[@]}" 2>/dev/null || true)
    for pkg in "${packages[@]}"; do
        [[ ${state[$pkg]:-} == ii* ]] || missing+=("$pkg")
    done
    [[ ${#missing[@]} == 0 ]] && return 0
    [[ $(id -u) == 0 ]] || die "missing packages (need root to install): ${missing[*]}"
    apt_update
    say "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The kernel version linux-image-amd64 currently depends on, e.g. 6.1.0-56-amd64.
resolve_kernel() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '!found && $1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ {
                 sub(/^linux-image-/, "", $2); print $2; found = 1 }'
}

download_kernel() {
    local kver=$1 dir=$2 pkg
    for pkg in "linux-image-$kver-unsigned" "linux-image-$kver"; do
        apt-cache show "$pkg" >/dev/null 2>&1 || continue
        say "downloading $pkg"
        (cd "$dir" && apt-get download -qq -o APT::Sandbox::User=root "$pkg") && return 0
    done
    return 1
}

# Unpack the kernel package into $cache/kernel-$kver (not installed on the host).
fetch_kernel() {
    local kver=$1 kdir=$cache/kernel-$1 tmp deb
    [[ -e $kdir/.complete ]] && return 0
    rm -rf "$kdir" "$cache"/download.*
    tmp=$(mktemp -d "$cache/download.XXXXXX")
    if ! download_kernel "$kver" "$tmp"; then
        apt_update
        download_kernel "$kver" "$tmp" || die "cannot download linux-image-$kver"
    fi
    deb=$(printf '%s\n' "$tmp"/*.deb)
    say "unpacking $(basename "$deb")"
    dpkg -x "$deb" "$kdir"
    rm -rf "$tmp"
    depmod -b "$kdir" "$kver"
    extract_vmlinux "$kdir/boot/vmlinuz-$kver" "$kdir/vmlinux"
    touch "$kdir/.complete"
}

# qemu boots the ELF vmlinux directly (PVH entry), which skips the in-guest
# decompression (several seconds under TCG). vmlinuz carries it as an xz stream.
extract_vmlinux() {
    local src=$1 dst=$2 off st magic
    off=$(LC_ALL=C grep -m1 -obUaP '\xFD7zXZ(?=\x00)' "$src" || true)
    off=${off%%:*}
    if [[ -n $off ]]; then
        # xz stops after the stream; tail may then die of SIGPIPE, which is fine.
        set +o pipefail
        st=0
        tail -c +$((off + 1)) "$src" | xz -dc --single-stream >"$dst.tmp" 2>/dev/null || st=$?
        set -o pipefail
        magic=$(head -c 4 "$dst.tmp" 2>/dev/null | tr -d '\0' || true)
        if [[ $st == 0 && $magic == $'\x7fELF' ]]; then
            mv "$dst.tmp" "$dst"
            return 0
        fi
    fi
    rm -f "$dst.tmp"
    say "could not extract vmlinux; booting the compressed kernel (slower)"
    ln -sfn "boot/${src##*/}" "$dst"
}

# Module files to insmod, dependencies first, from modules.dep.
module_order() {
    local kdir=$1 kver=$2 m f line i deps seen=" "
    local depfile=$kdir/lib/modules/$kver/modules.dep
    for m in "${initrd_modules[@]}"; do
        line=$(grep -m1 -E "/$m\.ko(\.[a-z]+)?:" "$depfile") ||
            die "module $m not found in $depfile"
        read -ra deps <<<"${line#*:}"
        # modules.dep lists the deepest dependency last.
        for ((i = ${#deps[@]} - 1; i >= -1; i--)); do
            if ((i >= 0)); then f=${deps[i]}; else f=${line%%:*}; fi
            [[ $seen == *" $f "* ]] && continue
            seen+="$f "
            printf '%s\n' "$f"
        done
    done
}

build_initramfs() {
    local kver=$1 kdir=$cache/kernel-$1 out=$cache/kernel-$1/initramfs.cpio.gz tmp f
    say "building initramfs"
    tmp=$(mktemp -d "$cache/initramfs.XXXXXX")
    mkdir -p "$tmp"/{bin,sbin,dev,proc,sys,lower,rw,newroot,results,modules}
    cp /bin/busybox "$tmp/bin/busybox"
    ln -s busybox "$tmp/bin/sh"
    : >"$tmp/modules/order"
    while read -r f; do
        cp "$kdir/lib/modules/$kver/$f" "$tmp/modules/"
        basename "$f" >>"$tmp/modules/order"
    done < <(module_order "$kdir" "$kver")
    write_init >"$tmp/init"
    # The kernel runs /sbin/modprobe from the initramfs for request_module();
    # forward it to the host's modprobe, which sees the unpacked modules.
    printf '#!/bin/sh\nexec /bin/chroot /newroot /usr/bin/env modprobe "$@"\n' >"$tmp/sbin/modprobe"
    chmod 755 "$tmp/init" "$tmp/sbin/modprobe"
    (cd "$tmp" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -1 >"$out.tmp"
    mv "$out.tmp" "$out"
    rm -rf "$tmp"
}

cmd_prepare() {
    local kver old want
    mkdir -p "$cache"
    exec 9>"$cache/lock"
    flock 9
    install_packages
    # Resolving the kernel costs about a second (apt-cache); do it again only
    # when the package lists changed since the last preparation.
    want="$(cksum <"$here/vm.sh")"
    if [[ -f $stamp ]]; then
        read -r old <"$stamp"
        kver=${old%% *}
        if [[ -n $kver && ${old#* } == "$want" && -e $cache/kernel-$kver/.complete &&
            -e $cache/kernel-$kver/initramfs.cpio.gz &&
            ! /var/lib/apt/lists -nt $stamp ]]; then
            return 0
        fi
    fi
    kver=$(resolve_kernel)
    if [[ -z $kver ]]; then
        apt_update
        kver=$(resolve_kernel)
        [[ -n $kver ]] || die "cannot resolve linux-image-amd64 (is this Debian?)"
    fi
    say "kernel $kver"
    fetch_kernel "$kver"
    build_initramfs "$kver"
    for old in "$cache"/kernel-*; do
        [[ $old == "$cache/kernel-$kver" ]] || rm -rf "$old"
    done
    printf '%s %s\n' "$kver" "$want" >"$stamp"
}

# Quote for the guest's busybox sh.
shq() { local s=${1//\'/\'\\\'\'}; printf "'%s'" "$s"; }

cmd_run() {
    (($# >= 1)) || usage
    local script=$1 t_start kver kdir results timeout st=0 qst=0 kernel f
    shift
    t_start=$(now_us)
    [[ $script == /* ]] || die "GUEST_SCRIPT must be an absolute path: $script"
    [[ -f $script && -x $script ]] || die "not an executable file: $script"
    # The guest mounts fresh /tmp, /run, /dev, /proc and /sys; the
    # repository itself is put back wherever it is (see /init).
    if [[ $script != "$repo"/* ]]; then
        case $script in
            /tmp/* | /run/* | /dev/* | /proc/* | /sys/*)
                die "$script is hidden in the guest (fresh /tmp, /run, /dev, /proc, /sys there)" ;;
        esac
    fi
    timeout=${RXE_VM_TIMEOUT:-600}
    if ! [[ $timeout =~ ^[0-9]+$ ]] || ((timeout < 30)); then
        die "RXE_VM_TIMEOUT must be a number of seconds >= 30"
    fi

    # Environment of the guest script.
    local envs=(
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        "HOME=/root" "USER=root" "LOGNAME=root" "LANG=C.UTF-8" "TERM=dumb"
        "RXE_GUEST=1" "RXE_DEVICES=rxe0,rxe1" "RXE_NETDEVS=veth0,veth1"
        "RXE_ADDRS=198.18.0.1,198.18.0.2"
    )
    local extra extras=()
    read -ra extras <<<"${RXE_VM_EXTRA_ENV:-}"
    for extra in "${extras[@]}"; do
        [[ $extra =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "RXE_VM_EXTRA_ENV: not NAME=VALUE: $extra"
        envs+=("$extra")
    done

    cmd_prepare
    exec 9>&-
    read -r kver _ <"$stamp"
    kdir=$cache/kernel-$kver
    kernel=$kdir/vmlinux

    mkdir -p "$cache/results"
    # Keep the 20 newest result folders.
    local old=("$cache"/results/*/)
    [[ -d ${old[0]} ]] || old=()
    ((${#old[@]} < 20)) || rm -rf "${old[@]:0:${#old[@]}-19}"
    results=$cache/results/$(date +%Y%m%d-%H%M%S)-$$
    mkdir -p "$results"
    envs+=("RXE_RESULTS=$results")

    {
        printf 'KVER=%s\n' "$(shq "$kver")"
        printf 'MODDIR=%s\n' "$(shq "$kdir/lib/modules/$kver")"
        printf 'REPO=%s\n' "$(shq "$repo")"
        printf 'RESULTS=%s\n' "$(shq "$results")"
        printf 'set --'
        for f in "${envs[@]}" "$script" "$@"; do printf ' %s' "$(shq "$f")"; done
        printf '\n'
    } >"$results/.vm.conf"

    say "booting $kver under qemu (TCG); guest timeout ${timeout} s; results in ${results#"$repo"/}"
    local t_qemu
    t_qemu=$(now_us)
    timeout -k 10 $((timeout + 120)) qemu-system-x86_64 \
        -nodefaults -no-user-config \
        -machine pc -accel tcg,thread=multi -cpu qemu64 -smp 2 -m 1G \
        -display none -vga none -monitor none -serial stdio -no-reboot -nic none \
        -kernel "$kernel" -initrd "$kdir/initramfs.cpio.gz" \
        -append "console=ttyS0 panic=-1 quiet RXE_VM_TIMEOUT=$timeout" \
        -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
        -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
        -fsdev local,id=results,path="${results//,/,,}",security_model=none \
        -device virtio-9p-pci,fsdev=results,mount_tag=results \
        </dev/null || qst=$?
    local t_end
    t_end=$(now_us)

    if [[ -f $results/.timing ]]; then
        local init_cs ready_cs run_cs
        read -r init_cs ready_cs run_cs <"$results/.timing" || true
        [[ -n ${init_cs:-} ]] && say "timing: kernel start to /init $((init_cs / 100)).$(printf '%02d' $((init_cs % 100))) s"
        [[ -n ${ready_cs:-} ]] && say "timing: kernel start to rxe ready $((ready_cs / 100)).$(printf '%02d' $((ready_cs % 100))) s"
        [[ -n ${run_cs:-} ]] && say "timing: guest script $((run_cs / 100)).$(printf '%02d' $((run_cs % 100))) s"
    fi
    say "timing: qemu $(fmt_us $((t_end - t_qemu))), total $(fmt_us $((t_end - t_start)))"

    if [[ -f $results/.status ]]; then
        read -r st <"$results/.status" || st=
        [[ $st =~ ^[0-9]+$ ]] || st=1
    else
        st=1
        if [[ $qst == 124 || $qst == 137 ]]; then
            say "qemu timed out (host-side limit $((timeout + 120)) s)"
        elif [[ -f $results/.watchdog ]]; then
            say "guest watchdog fired after ${timeout} s"
        else
            say "guest did not report an exit status (crashed? qemu status $qst)"
        fi
    fi
    if [[ -f $results/.error ]]; then
        say "guest setup failed: $(<"$results/.error")"
    fi
    say "guest exit status $st"
    if [[ -s $results/summary ]]; then
        tail -n 1 "$results/summary"
    fi
    exit "$st"
}

# /init of the initramfs (busybox sh). Runs with the kernel's environment plus
# RXE_VM_TIMEOUT from the command line; everything else comes from .vm.conf in
# the results share.
write_init() {
    cat <<'EOF'
#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
stty -onlcr 2>/dev/null

# Centiseconds since the kernel started, without forking.
uptime_cs() { read -r up _ </proc/uptime; up=${up%.*}${up#*.}; while [ "${up#0}" != "$up" ] && [ ${#up} -gt 1 ]; do up=${up#0}; done; }
fmt_cs() { s=$(($1 / 100)); c=$(($1 % 100)); [ $c -lt 10 ] && c=0$c; echo "$s.$c s"; }
say() { echo "rxe-vm: $*"; }
halt_now() { sync; poweroff -f; sleep 5; echo o >/proc/sysrq-trigger; sleep 60; }
die() {
    say "error: $*"
    [ -d /results/. ] && echo "$*" >/results/.error
    halt_now
}

uptime_cs; t_init=$up
say "/init started $(fmt_cs "$t_init") after kernel start"
timeout=${RXE_VM_TIMEOUT:-600}
(
    sleep "$timeout"
    say "watchdog: guest still running after $timeout s, powering off"
    echo watchdog >/results/.watchdog 2>/dev/null
    sync
    echo o >/proc/sysrq-trigger
) &

while read -r m; do
    insmod "/modules/$m" || die "insmod $m"
done </modules/order

opts=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "ro,cache=loose,$opts" hostroot /lower || die "cannot mount the host root"
mount -t 9p -o "$opts" results /results || die "cannot mount the results share"
# shellcheck source=/dev/null
. /results/.vm.conf

r=/newroot
mount -t tmpfs -o mode=0755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay $r ||
    die "cannot mount the overlay root"
mount -t proc proc $r/proc
mount -t sysfs sysfs $r/sys
mount -t devtmpfs devtmpfs $r/dev
mkdir -p $r/dev/pts $r/dev/shm
mount -t devpts -o gid=5,mode=0620,ptmxmode=0666 devpts $r/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $r/dev/shm
mount -t tmpfs -o mode=1777 tmpfs $r/tmp
mount -t tmpfs -o mode=0755 tmpfs $r/run
# A repository under /tmp or /run (hidden by the tmpfs just mounted) is put
# back, read-only like the rest of the host's root.
case $REPO in
/tmp/* | /run/*)
    mkdir -p "$r$REPO"
    mount -o bind "/lower$REPO" "$r$REPO" || die "cannot bind the repository $REPO"
    ;;
esac
mkdir -p "$r/lib/modules/$KVER"
mount -o bind "$r$MODDIR" "$r/lib/modules/$KVER" || die "cannot bind the kernel modules"
mount -o bind /results "$r$RESULTS" || die "cannot bind the results share"
hostname rxe-vm
echo /sbin/modprobe >/proc/sys/kernel/modprobe

in_root() { timeout 60 chroot $r /usr/bin/env "$@"; }
in_root modprobe -a veth rdma_rxe rdma_ucm || die "modprobe failed"
for c in all default; do
    echo 1 >/proc/sys/net/ipv4/conf/$c/accept_local
    echo 0 >/proc/sys/net/ipv4/conf/$c/rp_filter
done
# rxe0 -> rxe1 traffic stays on one host: both addresses are local, so route
# them out through the veth pair instead of lo (policy rules before the local
# table), and accept packets whose source is a local address.
in_root ip -batch - <<'IPEOF' || die "network setup failed"
link set lo up
link add veth0 type veth peer name veth1
addr add 198.18.0.1/24 dev veth0
addr add 198.18.0.2/24 dev veth1
link set veth0 up
link set veth1 up
rule add pref 10 iif lo to 198.18.0.2 table 100
route add 198.18.0.2 dev veth0 src 198.18.0.1 table 100
rule add pref 10 iif lo to 198.18.0.1 table 101
route add 198.18.0.1 dev veth1 src 198.18.0.2 table 101
rule add pref 100 table local
rule del pref 0 table local
IPEOF
for c in veth0 veth1; do
    echo 1 >/proc/sys/net/ipv4/conf/$c/accept_local
    echo 0 >/proc/sys/net/ipv4/conf/$c/rp_filter
done
in_root rdma link add rxe0 type rxe netdev veth0 || die "rdma link add rxe0 failed"
in_root rdma link add rxe1 type rxe netdev veth1 || die "rdma link add rxe1 failed"

# Wait (at most 30 s) for both ports to be ACTIVE and to have an IPv4-mapped GID.
gid_index=
n=0
while :; do
    ready=1
    for d in rxe0 rxe1; do
        read -r s </sys/class/infiniband/$d/ports/1/state || s=
        [ "$s" = "4: ACTIVE" ] || ready=0
    done
    if [ $ready = 1 ] && [ -z "$gid_index" ]; then
        for i in 0 1 2 3 4 5 6 7; do
            read -r g </sys/class/infiniband/rxe0/ports/1/gids/$i || g=
            case $g in 0000:0000:0000:0000:0000:ffff:*) gid_index=$i; break ;; esac
        done
    fi
    [ $ready = 1 ] && [ -n "$gid_index" ] && break
    n=$((n + 1))
    [ $n -ge 300 ] && die "rxe ports did not become ACTIVE"
    sleep 0.1
done
uptime_cs; t_ready=$up
say "rxe0, rxe1 ACTIVE $(fmt_cs "$t_ready") after kernel start (IPv4 GID index $gid_index)"

budget=$((timeout - t_ready / 100 - 15))
[ $budget -lt 10 ] && budget=10
chroot $r /usr/bin/timeout -k 5 $budget /usr/bin/env -i -C "$REPO" \
    RXE_GID_INDEX=$gid_index "$@" </dev/null
st=$?
uptime_cs; t_done=$up
[ $st = 124 ] && say "guest script timed out after $budget s"
say "guest script finished in $(fmt_cs $((t_done - t_ready))) with status $st"
echo "$t_init $t_ready $((t_done - t_ready))" >/results/.timing
echo $st >/results/.status
halt_now
EOF
}

case ${1:-} in
    prepare) shift; (($# == 0)) || usage; cmd_prepare ;;
    run) shift; cmd_run "$@" ;;
    *) usage ;;
esac
