//! Every struct and union the bindings define, compared field by field with
//! what this machine's C compiler says: the size of each type and the offset
//! and size of each named field, from a C probe compiled by the build script
//! against the same installed headers.
#![cfg(any(feature = "fabric", feature = "verbs"))]

use core::ffi::{c_char, CStr};

#[cfg(feature = "fabric")]
use libfabric_sys::fabric;
#[cfg(feature = "verbs")]
use libfabric_sys::verbs;

/// One row of the ABI table.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AbiEntry {
    ty: &'static str,
    field: &'static str,
    offset: usize,
    size: usize,
}

#[repr(C)]
struct CAbiEntry {
    ty: *const c_char,
    field: *const c_char,
    offset: usize,
    size: usize,
}

extern "C" {
    static libfabric_sys_abi_table: [CAbiEntry; 0];
    static libfabric_sys_abi_table_len: usize;
}

fn field_size<T, F>(_: fn(*const T) -> *const F) -> usize {
    core::mem::size_of::<F>()
}

fn rust_table() -> Vec<AbiEntry> {
    let table: &[AbiEntry] = include!(concat!(env!("OUT_DIR"), "/abi_rust.rs"));
    table.to_vec()
}

fn c_table() -> Vec<(String, String, usize, usize)> {
    // SAFETY: the probe defines the table as a const array of
    // `libfabric_sys_abi_table_len` entries whose strings are literals.
    unsafe {
        let len = libfabric_sys_abi_table_len;
        let base = libfabric_sys_abi_table.as_ptr();
        (0..len)
            .map(|i| {
                let e = &*base.add(i);
                (
                    CStr::from_ptr(e.ty).to_string_lossy().into_owned(),
                    CStr::from_ptr(e.field).to_string_lossy().into_owned(),
                    e.offset,
                    e.size,
                )
            })
            .collect()
    }
}

#[test]
fn every_struct_and_field_matches_the_c_compiler() {
    let rust = rust_table();
    let c = c_table();
    assert_eq!(rust.len(), c.len(), "the two tables list the same rows");
    let mut mismatches = Vec::new();
    for (r, (ty, field, offset, size)) in rust.iter().zip(&c) {
        assert_eq!(
            (r.ty, r.field),
            (ty.as_str(), field.as_str()),
            "rows in the same order"
        );
        if (r.offset, r.size) != (*offset, *size) {
            mismatches.push(format!(
                "{}.{}: Rust offset {} size {}, C offset {offset} size {size}",
                r.ty, r.field, r.offset, r.size
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "ABI mismatches:\n{}",
        mismatches.join("\n")
    );
}

/// The structs the safe crates read or write must all be in the table, with
/// every field: a table that silently lost one would prove nothing.
#[test]
fn the_table_covers_the_structs_the_safe_crates_use() {
    let rust = rust_table();
    let mut required: Vec<&str> = Vec::new();
    #[cfg(feature = "fabric")]
    required.extend([
        "fi_info",
        "fi_tx_attr",
        "fi_rx_attr",
        "fi_ep_attr",
        "fi_domain_attr",
        "fi_fabric_attr",
        "fi_eq_attr",
        "fi_eq_entry",
        "fi_eq_cm_entry",
        "fi_eq_err_entry",
        "fi_cq_attr",
        "fi_cq_entry",
        "fi_cq_msg_entry",
        "fi_cq_data_entry",
        "fi_cq_tagged_entry",
        "fi_cq_err_entry",
        "fi_wait_pollfd",
        "fi_mutex_cond",
        "fi_wait_attr",
        "fi_poll_attr",
        "fi_msg",
        "fi_msg_tagged",
        "fi_mr_attr",
        "fid",
    ]);
    #[cfg(feature = "verbs")]
    required.extend([
        "ibv_async_event",
        "ibv_context",
        "ibv_cq",
        "ibv_qp",
        "ibv_srq",
        "ibv_wq",
        "ibv_wc",
        "ibv_port_attr",
        "ibv_device_attr",
        "ibv_qp_attr",
        "ibv_qp_init_attr",
        "ibv_srq_init_attr",
        "ibv_send_wr",
        "ibv_recv_wr",
        "ibv_sge",
        "ibv_comp_channel",
        "ibv_gid",
    ]);
    for ty in required {
        let rows: Vec<_> = rust.iter().filter(|e| e.ty == ty).collect();
        assert!(
            rows.len() >= 2,
            "{ty} is missing from the ABI table (rows: {rows:?})"
        );
    }
    #[cfg(feature = "fabric")]
    {
        // Every field 1.17 has, in its order; newer headers may add more
        // (1.22 appends src_addr), which the table then also compares.
        let fields: Vec<_> = rust
            .iter()
            .filter(|e| e.ty == "fi_cq_err_entry" && !e.field.is_empty())
            .map(|e| e.field)
            .collect();
        let since_1_17 = [
            "op_context",
            "flags",
            "len",
            "buf",
            "data",
            "tag",
            "olen",
            "err",
            "prov_errno",
            "err_data",
            "err_data_size",
        ];
        assert_eq!(
            &fields[..since_1_17.len()],
            since_1_17,
            "fi_cq_err_entry of libfabric {}.{}: {fields:?}",
            fabric::FI_MAJOR_VERSION,
            fabric::FI_MINOR_VERSION
        );
    }
}

#[cfg(feature = "fabric")]
#[test]
fn constants_have_the_types_c_uses() {
    let _: u64 = fabric::FI_MSG;
    let _: u64 = fabric::FI_RMA_EVENT;
    let _: u64 = fabric::FI_ADDR_UNSPEC;
    let _: u64 = fabric::FI_ADDR_NOTAVAIL;
    let _: u64 = fabric::FI_KEY_NOTAVAIL;
    let _: core::ffi::c_int = fabric::FI_MR_LOCAL;
    let _: core::ffi::c_int = fabric::errno::FI_EAGAIN;
    let _: core::ffi::c_int = fabric::errno::FI_EAVAIL;
    let _: core::ffi::c_int = fabric::errno::FI_ETOOSMALL;
    assert_eq!(fabric::FI_ADDR_UNSPEC, u64::MAX);
    assert_eq!(fabric::errno::FI_EAGAIN, libc::EAGAIN);
    assert_eq!(fabric::errno::FI_EAVAIL, 259);
    assert_eq!(fabric::FI_VERSION(1, 17), 0x1_0011);
    assert_eq!(fabric::FI_MAJOR(fabric::FI_VERSION(2, 3)), 2);
    assert_eq!(fabric::FI_MINOR(fabric::FI_VERSION(2, 3)), 3);
    assert!(fabric::FI_VERSION_GE(
        fabric::FI_VERSION(1, 17),
        fabric::FI_VERSION(1, 9)
    ));
    assert!(fabric::FI_VERSION_LT(
        fabric::FI_VERSION(1, 9),
        fabric::FI_VERSION(1, 17)
    ));
    assert!(fabric::FI_VERSION_GE(
        fabric::FI_VERSION(2, 0),
        fabric::FI_VERSION(1, 17)
    ));
    assert_eq!(
        fabric::HEADER_VERSION,
        fabric::FI_VERSION(fabric::FI_MAJOR_VERSION, fabric::FI_MINOR_VERSION)
    );
}
