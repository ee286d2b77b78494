#!/usr/bin/env bash
# Builds a second libfabric (1.22.0) from the source that the crates.io
# crate lamellar-libfabric-src 0.1.1 vendors, with only the providers that
# need no hardware plus verbs, into target/libfabric-1.22 (cached: a second
# run does nothing). Prints the install prefix on its last line.
#
#   tests/versions/build-libfabric.sh        # build (or reuse) and print the prefix
#
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig LD_LIBRARY_PATH=PREFIX/lib cargo test ...
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
version=1.22.0
crate=lamellar-libfabric-src
crate_version=0.1.1
prefix=$root/target/libfabric-$version
work=$root/target/libfabric-build

say() { printf '==> %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if [ -f "$prefix/.complete" ] && [ -f "$prefix/lib/pkgconfig/libfabric.pc" ]; then
    say "libfabric $version: cached in $prefix"
    echo "$prefix"
    exit 0
fi

missing=()
for p in autoconf automake libtool make librdmacm-dev libnuma-dev libibverbs-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing: ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Fetch the crate's source through cargo (a throwaway manifest that depends
# on it), then find it in cargo's registry sources.
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

say "building libfabric $version from $src/libfabric (tcp, udp, rxm, rxd, shm, sockets, verbs)"
rm -rf "$work/src" "$prefix"
cp -r "$src/libfabric" "$work/src"
cd "$work/src"
start=$SECONDS
./autogen.sh >"$work/autogen.log" 2>&1
./configure --prefix="$prefix" --disable-static \
    --enable-tcp=yes --enable-sockets=yes --enable-udp=yes --enable-rxm=yes \
    --enable-rxd=yes --enable-shm=yes --enable-verbs=yes \
    --disable-psm2 --disable-psm3 --disable-efa --disable-cxi --disable-usnic \
    --disable-opx --disable-ucx --disable-sm2 --disable-xpmem --disable-perf \
    --disable-lpp --disable-mrail --disable-rstream --disable-hook_debug \
    --disable-hook_hmem --disable-dmabuf_peer_mem --disable-trace --disable-profile \
    >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log" >&2; exit 1; }
make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -30 "$work/make.log" >&2; exit 1; }
make install >"$work/install.log" 2>&1
touch "$prefix/.complete"
say "libfabric $version built in $((SECONDS - start)) s into $prefix"
echo "$prefix"
