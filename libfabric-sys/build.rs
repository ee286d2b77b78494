//! Generates the libfabric bindings from the headers installed on this
//! machine (found with pkg-config), with a C shim for every `static inline`
//! function, through `rdma-sys-build`. This script adds what is particular
//! to libfabric: the types of its untyped macros, the `errno` module, and
//! the header version handed to dependent crates.
//!
//! With `DOCS_RS` set, the checked-in bindings under `src/pregenerated/` are
//! used and nothing is linked. Refresh them with
//! `OFI_SYS_REGENERATE=1 cargo build -p ofi-sys`.

use rdma_sys_build::bindgen::callbacks::{IntKind, ParseCallbacks};
use rdma_sys_build::Library;
use std::collections::BTreeSet;
use std::fmt::Write as _;

const LIBFABRIC: Library = Library {
    crate_name: "ofi-sys",
    prefix: "OFI_SYS",
    pkg: "libfabric",
    min_version: Some("1.17"),
    debian: "libfabric-dev",
    fedora: "libfabric-devel",
    headers: &[
        "rdma/fabric.h",
        "rdma/fi_errno.h",
        "rdma/fi_domain.h",
        "rdma/fi_eq.h",
        "rdma/fi_cm.h",
        "rdma/fi_endpoint.h",
        "rdma/fi_rma.h",
        "rdma/fi_tagged.h",
        "rdma/fi_atomic.h",
    ],
    functions: "fi_.*",
    types: "fi_.*|fid.*",
    vars: "FI_.*",
    abi_tags: &["fi_", "fid"],
};

fn main() {
    rdma_sys_build::rerun_if_changed(&LIBFABRIC);
    if rdma_sys_build::docs_rs() {
        // docs.rs has neither the library nor its headers.
        let bindings = rdma_sys_build::use_pregenerated(&["fabric.rs", "fabric_errno.rs"]);
        publish_header_version(&bindings);
        return;
    }
    let found = rdma_sys_build::probe(&LIBFABRIC);
    let errno_h = found
        .headers
        .iter()
        .find(|h| h.ends_with("rdma/fi_errno.h"))
        .expect("fi_errno.h is among the headers");
    let errno = rdma_sys_build::defined_names(errno_h, "FI_");
    let bindings = rdma_sys_build::generate(&LIBFABRIC, &found, Box::new(MacroTypes { errno }));
    let errno = errno_module(errno_h, &bindings);
    rdma_sys_build::write_bindings(
        &LIBFABRIC,
        &found,
        &[("fabric.rs", &bindings), ("fabric_errno.rs", &errno)],
    );
    rdma_sys_build::compile(&LIBFABRIC, &found, &bindings);
    publish_header_version(&bindings);
}

/// Hands the libfabric header version to the crates that depend on this
/// one (`DEP_FABRIC_HEADER_MAJOR` / `_MINOR` in their build scripts), so
/// that they can derive `cfg`s for items that exist in some versions only.
fn publish_header_version(bindings: &str) {
    let value = |name: &str| -> u32 {
        let key = format!("pub const {name}: u32 = ");
        bindings
            .lines()
            .find_map(|l| l.trim().strip_prefix(&key)?.strip_suffix(';')?.parse().ok())
            .unwrap_or_else(|| {
                rdma_sys_build::fail(&LIBFABRIC, &format!("{name} is missing from the bindings"))
            })
    };
    println!("cargo:header_major={}", value("FI_MAJOR_VERSION"));
    println!("cargo:header_minor={}", value("FI_MINOR_VERSION"));
    // `struct fi_mr_attr` names its iovecs `mr_iov` directly, or (headers
    // with dma-buf registration) in an anonymous union with `dmabuf`,
    // which bindgen names `__bindgen_anon_1`.
    let mr_attr = bindings
        .split("pub struct fi_mr_attr {")
        .nth(1)
        .and_then(|rest| rest.split('}').next())
        .unwrap_or_else(|| rdma_sys_build::fail(&LIBFABRIC, "struct fi_mr_attr is missing"));
    let direct = mr_attr
        .lines()
        .any(|l| l.trim_start().starts_with("pub mr_iov:"));
    println!("cargo:mr_iov_in_union={}", u8::from(!direct));
    // Enumerators some headers have and others lack, by presence.
    let has = |name: &str| bindings.contains(&format!("pub const {name}:"));
    println!(
        "cargo:cntr_events_bytes={}",
        u8::from(has("FI_CNTR_EVENTS_BYTES"))
    );
}

/// Gives untyped `#define`s the types the C API uses them with, by rule
/// and value, never by a list of one version's names:
/// - the macros `rdma/fi_errno.h` defines are error codes, `c_int`;
/// - `FI_MR_*` that fit an `int` are `fi_domain_attr::mr_mode` bits, `c_int`;
///   a larger one (`FI_MR_DMABUF`, `1ULL << 40` in 1.22) is a 64-bit flag;
/// - any other `FI_*` is a capability, mode or operation flag, `u64`.
#[derive(Debug)]
struct MacroTypes {
    /// The macro names `rdma/fi_errno.h` defines.
    errno: BTreeSet<String>,
}

impl ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, value: i64) -> Option<IntKind> {
        if self.errno.contains(name) || name == "FI_SUCCESS" {
            return Some(IntKind::Int);
        }
        if name.ends_with("_VERSION") {
            return Some(IntKind::U32);
        }
        if name == "FI_SHARED_CONTEXT" {
            return Some(IntKind::Custom {
                name: "usize",
                is_signed: false,
            });
        }
        if name.starts_with("FI_MR_") && i32::try_from(value).is_ok() {
            // fi_domain_attr::mr_mode is an int.
            return Some(IntKind::Int);
        }
        if name.starts_with("FI_") {
            // Capability, mode, operation and completion flags: uint64_t.
            return Some(IntKind::U64);
        }
        None
    }
}

/// The error codes of fi_errno.h, all typed `c_int` as libfabric returns
/// them; the ones declared in an anonymous enum are re-typed here so that no
/// code ever has to name bindgen's `_bindgen_ty_N`.
fn errno_module(errno_h: &std::path::Path, bindings: &str) -> String {
    let text = std::fs::read_to_string(errno_h).expect("read fi_errno.h");
    let mut names = BTreeSet::new();
    for token in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        // Only names the bindings define: the header lists some in comments.
        let defined = bindings.contains(&format!("pub const {token}:"));
        if token.starts_with("FI_E")
            && token != "FI_ERRNO_H"
            && token != "FI_ERRNO_OFFSET"
            && defined
        {
            names.insert(token.to_string());
        }
    }
    let mut out = String::from(
        "/// Every error code of `rdma/fi_errno.h`, as the positive `c_int` that\n\
         /// libfabric calls return negated.\n\
         pub mod errno {\n",
    );
    for name in names {
        writeln!(
            out,
            "    #[allow(missing_docs)]\n    pub const {name}: ::core::ffi::c_int = super::{name} as ::core::ffi::c_int;"
        )
        .unwrap();
    }
    out.push_str("}\n");
    out
}
