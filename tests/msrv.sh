#!/usr/bin/env bash
# Checks that every published crate's rust-version is honest for the
# dependencies the lockfile holds: each package in a crate's normal and
# build dependency closure declares a rust-version no newer than the
# crate's. The lockfile is resolved MSRV-aware (resolver = "3"; refresh it
# with `cargo update`, which then picks versions that fit), and clippy's
# `incompatible_msrv` lint (denied in the workspace) checks the crates'
# own use of std against the same rust-version. Prints one line per crate,
# then "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
command -v jq >/dev/null || { echo "error: jq is needed (apt-get install jq)" >&2; exit 1; }

CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=fallback cargo metadata --format-version 1 --locked --all-features |
    jq -r '
    def ver: (. // "0") | split(".") | map(tonumber) | . + [0, 0, 0] | .[0:3];
    . as $m
    | ($m.packages | map({key: .id, value: .}) | from_entries) as $pkg
    | ($m.resolve.nodes | map({key: .id, value: .}) | from_entries) as $node
    | $m.packages[]
    | select(.source == null and .publish == null)
    | . as $crate
    | [ $crate.id ]
    | [ recurse(
            map($node[.].deps[]
                | select(any(.dep_kinds[]; .kind == null or .kind == "build"))
                | .pkg) | unique | select(length > 0)
        ) ] | flatten | unique
    | map(select(. != $crate.id) | $pkg[.]
        | select((.rust_version | ver) > ($crate.rust_version | ver))
        | "\(.name) \(.version) needs \(.rust_version)")
    | if length == 0
      then "ok \($crate.name) \($crate.rust_version): every dependency accepts it"
      else "FAIL \($crate.name) \($crate.rust_version): " + join(", ")
      end' | awk '
        { print }
        /^ok /   { p++ }
        /^FAIL / { f++ }
        END { printf "%d passed, %d failed\n", p, f; exit (f > 0 || p == 0) }'
