//! Derives `cfg`s from the libfabric headers the bindings were generated
//! from (ofi-sys publishes their version), for items whose status
//! differs between versions: `libfabric_2` for 2.x headers, which deprecate
//! wait sets, poll sets, `FI_WAIT_MUTEX_COND` and the old memory
//! registration modes.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_FABRIC_HEADER_MAJOR");
    println!("cargo::rustc-check-cfg=cfg(libfabric_2)");
    let major: u32 = std::env::var("DEP_FABRIC_HEADER_MAJOR")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    if major >= 2 {
        println!("cargo:rustc-cfg=libfabric_2");
    }
}
