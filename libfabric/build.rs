//! Derives `cfg`s from the libfabric headers the bindings were generated
//! from (ofi-sys publishes their version), for items whose status
//! differs between versions: `libfabric_2` for 2.x headers, which deprecate
//! wait sets, poll sets, `FI_WAIT_MUTEX_COND` and the old memory
//! registration modes; `libfabric_cntr_events_bytes` where the headers
//! define `FI_CNTR_EVENTS_BYTES`; `mr_iov_in_union` for headers whose
//! `struct fi_mr_attr` holds `mr_iov` in a union (with `dmabuf`).
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_FABRIC_MR_IOV_IN_UNION");
    println!("cargo::rustc-check-cfg=cfg(mr_iov_in_union)");
    if std::env::var("DEP_FABRIC_MR_IOV_IN_UNION").as_deref() == Ok("1") {
        println!("cargo:rustc-cfg=mr_iov_in_union");
    }
    println!("cargo:rerun-if-env-changed=DEP_FABRIC_HEADER_MAJOR");
    println!("cargo::rustc-check-cfg=cfg(libfabric_2)");
    let major: u32 = std::env::var("DEP_FABRIC_HEADER_MAJOR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    if major >= 2 {
        println!("cargo:rustc-cfg=libfabric_2");
    }
    // `FI_CNTR_EVENTS_BYTES` where the headers define it (ofi-sys looks).
    println!("cargo:rerun-if-env-changed=DEP_FABRIC_CNTR_EVENTS_BYTES");
    println!("cargo::rustc-check-cfg=cfg(libfabric_cntr_events_bytes)");
    if std::env::var("DEP_FABRIC_CNTR_EVENTS_BYTES").as_deref() == Ok("1") {
        println!("cargo:rustc-cfg=libfabric_cntr_events_bytes");
    }
}
