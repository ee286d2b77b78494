//! Generates the libibverbs bindings from the rdma-core headers installed on
//! this machine (found with pkg-config), with a C shim for every `static
//! inline` function, through `rdma-sys-build`.
//!
//! With `DOCS_RS` set, the checked-in bindings under `src/pregenerated/` are
//! used and nothing is linked. Refresh them with
//! `LIBIBVERBS_SYS_REGENERATE=1 cargo build -p libibverbs-sys`.

use rdma_sys_build::bindgen::callbacks::ParseCallbacks;
use rdma_sys_build::Library;

const LIBIBVERBS: Library = Library {
    crate_name: "libibverbs-sys",
    prefix: "LIBIBVERBS_SYS",
    pkg: "libibverbs",
    min_version: None,
    debian: "libibverbs-dev",
    fedora: "rdma-core-devel",
    headers: &["infiniband/verbs.h"],
    functions: "_*ibv_.*|verbs_.*",
    types: "_*ibv_.*|verbs_.*",
    vars: "IBV_.*",
    abi_tags: &["ibv_"],
};

/// bindgen's default macro types are right for verbs.h.
#[derive(Debug)]
struct DefaultTypes;

impl ParseCallbacks for DefaultTypes {}

fn main() {
    rdma_sys_build::rerun_if_changed(&LIBIBVERBS);
    if rdma_sys_build::docs_rs() {
        // docs.rs has neither the library nor its headers. The bindings
        // are copied to OUT_DIR; their text is not needed here.
        let _ = rdma_sys_build::use_pregenerated(&["verbs.rs"]);
        return;
    }
    let found = rdma_sys_build::probe(&LIBIBVERBS);
    let bindings = rdma_sys_build::generate(&LIBIBVERBS, &found, Box::new(DefaultTypes));
    rdma_sys_build::write_bindings(&LIBIBVERBS, &found, &[("verbs.rs", &bindings)]);
    rdma_sys_build::compile(&LIBIBVERBS, &found, &bindings);
}
