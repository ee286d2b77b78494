//! Every struct and union of the libfabric bindings, compared field by
//! field with what this machine's C compiler says: the size of each type and
//! the offset and size of each named field, from a C probe the build script
//! compiles against the same installed headers.

use libfabric_sys::fabric;
#[allow(unused_imports)]
use libfabric_sys::fabric::*;

include!(concat!(env!("OUT_DIR"), "/abi_check.rs"));

#[test]
fn every_struct_and_field_matches_the_c_compiler() {
    assert_tables_match();
}

/// The structs the safe crate reads or writes must all be in the table, with
/// every field: a table that silently lost one would prove nothing.
#[test]
fn the_table_covers_the_structs_the_safe_crate_uses() {
    assert_covers(&[
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
    let rust = rust_table();
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
