//! Every struct and union of the libibverbs bindings, compared field by
//! field with what this machine's C compiler says: the size of each type and
//! the offset and size of each named field, from a C probe the build script
//! compiles against the same installed headers.

#[allow(unused_imports)]
use libibverbs_sys::*;

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
}
