#!/usr/bin/env bash
# Builds soft-iWARP (siw.ko) for the kernel the rxe guest boots. Debian's
# kernel is built without it (# CONFIG_RDMA_SIW is not set), so the module is
# built out of tree from Debian's linux-source-6.1 (only its
# drivers/infiniband/sw/siw) against the matching linux-headers package,
# both of the version the guest boots, resolved at run time. The result is
# cached in target/rxe-vm/siw-KVER/siw.ko; a second run does nothing.
#
#   tests/rxe/build-siw.sh KVER       # prints the path of siw.ko
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
kver=${1:?usage: build-siw.sh KVER (e.g. 6.1.0-56-amd64)}
out=$repo/target/rxe-vm/siw-$kver
say() { printf 'build-siw: %s\n' "$*" >&2; }
die() { printf 'build-siw: error: %s\n' "$*" >&2; exit 1; }

if [[ -f $out/siw.ko && -f $out/.complete ]]; then
    echo "$out/siw.ko"
    exit 0
fi
[[ $(id -u) == 0 ]] || die "needs root to install linux-headers-$kver"
start=$SECONDS
mkdir -p "$out"
rm -rf "$out"/*

headers=/usr/src/linux-headers-$kver
if [[ ! -f $headers/Module.symvers ]]; then
    say "installing linux-headers-$kver"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "linux-headers-$kver" make >/dev/null || die "cannot install linux-headers-$kver"
fi
# The source of the same Debian version as the headers.
version=$(dpkg-query -W -f='${Version}' "linux-headers-$kver")
series=${kver%%-*}
series=${series%.*}
src_pkg=linux-source-$series
tmp=$(mktemp -d "$out/src.XXXXXX")
say "downloading $src_pkg $version (for drivers/infiniband/sw/siw only)"
(cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$src_pkg=$version") ||
    { apt-get update -qq; (cd "$tmp" && apt-get download -qq -o APT::Sandbox::User=root "$src_pkg=$version"); } ||
    die "cannot download $src_pkg=$version"
dpkg -x "$tmp"/*.deb "$tmp/pkg"
tarball=$(find "$tmp/pkg/usr/src" -maxdepth 1 -name "linux-source-$series.tar.*" | head -n 1)
[[ -n $tarball ]] || die "no source tarball in $src_pkg"
tar -xf "$tarball" -C "$tmp" "linux-source-$series/drivers/infiniband/sw/siw"
siw=$tmp/linux-source-$series/drivers/infiniband/sw/siw
say "building siw.ko against $headers"
make -s -C "$headers" M="$siw" CONFIG_RDMA_SIW=m modules >"$out/build.log" 2>&1 ||
    { tail -20 "$out/build.log" >&2; die "the siw build failed"; }
cp "$siw/siw.ko" "$out/siw.ko"
rm -rf "$tmp"
if command -v modinfo >/dev/null; then modinfo "$out/siw.ko" | grep -E "^(vermagic|depends)" >&2 || true; fi
touch "$out/.complete"
say "built in $((SECONDS - start)) s"
echo "$out/siw.ko"
