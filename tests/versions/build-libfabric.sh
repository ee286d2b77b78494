#!/usr/bin/env bash
# Builds another libfabric from source, with only the providers that need no
# hardware plus verbs, into target/libfabric-<version> (cached: a second run
# does nothing). Prints the install prefix on its last line.
#
#   tests/versions/build-libfabric.sh 1.22   # 1.22.0, from the crates.io crate
#                                            # lamellar-libfabric-src 0.1.1
#   tests/versions/build-libfabric.sh 2      # the newest 2.x Debian carries, from
#                                            # the source package of Debian's
#                                            # development suite (sid)
#
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig LD_LIBRARY_PATH=PREFIX/lib cargo test ...
# Both sources come through the package clients as this machine has them set
# up (cargo, apt-get); nothing else is downloaded.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
series=${1:-1.22}
work=$root/target/libfabric-build-$series
# The prefix of a finished build, whatever its exact version.
link=$root/target/libfabric-$series

say() { printf '==> %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if [ -f "$link/.complete" ] && [ -f "$link/lib/pkgconfig/libfabric.pc" ]; then
    say "libfabric $series: cached in $link ($(cat "$link/.complete"))"
    echo "$link"
    exit 0
fi

missing=()
for p in autoconf automake libtool make xz-utils librdmacm-dev libnuma-dev libibverbs-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

rm -rf "$work"
mkdir -p "$work"

# 1.22.0: the crate's source, fetched by cargo (a throwaway manifest that
# depends on it), then found in cargo's registry sources.
source_from_crate() {
    local crate=lamellar-libfabric-src crate_version=0.1.1 registry src
    version=1.22.0
    mkdir -p "$work/fetch/src"
    cat >"$work/fetch/Cargo.toml" <<TOML
[package]
name = "fetch-libfabric-source"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$crate = "=$crate_version"

[workspace]
TOML
    echo "fn main() {}" >"$work/fetch/src/main.rs"
    say "fetching $crate $crate_version (libfabric $version source) through cargo"
    cargo fetch --quiet --manifest-path "$work/fetch/Cargo.toml"
    registry=${CARGO_HOME:-$HOME/.cargo}/registry/src
    src=$(find "$registry" -maxdepth 2 -type d -name "$crate-$crate_version" | head -n 1)
    [ -n "$src" ] && [ -f "$src/libfabric/configure.ac" ] || {
        echo "error: the libfabric source was not found under $registry/*/$crate-$crate_version/libfabric" >&2
        exit 1
    }
    cp -r "$src/libfabric" "$work/src"
}

# 2.x: the upstream tarball of Debian's libfabric source package in the
# development suite, through apt-get with a private source list that points
# at the archive this machine's apt already uses (nothing system-wide is
# changed).
source_from_debian() {
    local uri apt tarball
    uri=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
        grep -v security | head -n 1)
    [ -n "$uri" ] || uri=$(sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null |
        grep -v security | head -n 1)
    [ -n "$uri" ] || { echo "error: no Debian archive found in this machine's apt sources" >&2; exit 1; }
    mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/dl"
    echo "deb-src $uri sid main" >"$work/apt/sources.list"
    apt=(apt-get -q -o "Dir::Etc::SourceList=$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
        -o APT::Sandbox::User=root)
    say "fetching the libfabric source package of Debian's development suite through apt-get"
    "${apt[@]}" update -qq >"$work/apt.log" 2>&1 || { tail -5 "$work/apt.log" >&2; exit 1; }
    # Only the upstream tarball is needed; the Debian packaging files may be
    # missing from a partial mirror, which apt reports as an error.
    (cd "$work/dl" && "${apt[@]}" source --download-only libfabric >>"$work/apt.log" 2>&1) || true
    tarball=$(find "$work/dl" -maxdepth 1 -name 'libfabric_*.orig.tar.*' | head -n 1)
    [ -n "$tarball" ] || { tail -5 "$work/apt.log" >&2; echo "error: no libfabric source tarball came through apt-get" >&2; exit 1; }
    version=${tarball##*/libfabric_}
    version=${version%%.orig.tar.*}
    case $version in
    2.*) ;;
    *) echo "error: Debian's development suite has libfabric $version, not a 2.x" >&2; exit 1 ;;
    esac
    mkdir -p "$work/src"
    tar xf "$tarball" -C "$work/src" --strip-components=1
}

case $series in
1.22) source_from_crate ;;
2) source_from_debian ;;
*) echo "usage: $0 1.22|2" >&2; exit 2 ;;
esac

prefix=$root/target/libfabric-$version
say "building libfabric $version (tcp, udp, rxm, rxd, shm, sockets, verbs) into $prefix"
rm -rf "$prefix" "$link"
cd "$work/src"
start=$SECONDS
./autogen.sh >"$work/autogen.log" 2>&1 || { tail -30 "$work/autogen.log" >&2; exit 1; }
./configure --prefix="$prefix" --disable-static \
    --enable-tcp=yes --enable-sockets=yes --enable-udp=yes --enable-rxm=yes \
    --enable-rxd=yes --enable-shm=yes --enable-verbs=yes \
    --disable-psm2 --disable-psm3 --disable-efa --disable-cxi --disable-usnic \
    --disable-opx --disable-ucx --disable-sm2 --disable-xpmem --disable-perf \
    --disable-lpp --disable-mrail --disable-hook_debug --disable-lnx \
    --disable-hook_hmem --disable-dmabuf_peer_mem --disable-trace --disable-profile \
    >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log" >&2; exit 1; }
make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -30 "$work/make.log" >&2; exit 1; }
make install >"$work/install.log" 2>&1
echo "$version" >"$prefix/.complete"
ln -sfn "$prefix" "$link"
say "libfabric $version built in $((SECONDS - start)) s into $prefix"
echo "$link"
