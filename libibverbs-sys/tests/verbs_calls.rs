//! Linking and calls through the raw libibverbs bindings. On a host without
//! RDMA devices the device list is empty; inside the soft-RoCE guest
//! (`RXE_GUEST=1`) it holds the rxe devices.

use core::ptr;
use libibverbs_sys::*;

#[test]
fn exported_and_inline_functions_link() {
    // Taking the addresses makes the linker resolve them: the exported
    // functions from libibverbs, the inline ones from the generated shim.
    let exported: [*const (); 4] = [
        ibv_get_async_event as *const (),
        ibv_ack_async_event as *const (),
        ibv_get_cq_event as *const (),
        ibv_ack_cq_events as *const (),
    ];
    let inline: [*const (); 4] = [
        ibv_poll_cq as *const (),
        ibv_post_send as *const (),
        ibv_req_notify_cq as *const (),
        ___ibv_query_port as *const (),
    ];
    assert!(exported.iter().chain(&inline).all(|f| !f.is_null()));
}

#[test]
fn device_list_matches_the_machine() {
    let in_guest = std::env::var_os("RXE_GUEST").is_some();
    let mut n = -1;
    // SAFETY: ibv_get_device_list(3) returns a null-terminated array to be
    // released with ibv_free_device_list, or NULL with errno set.
    let list = unsafe { ibv_get_device_list(&mut n) };
    let err = std::io::Error::last_os_error();
    if list.is_null() {
        assert!(!in_guest, "no RDMA devices inside the rxe guest: {err}");
        // The host kernel has no RDMA subsystem: libibverbs says ENOSYS.
        assert_eq!(err.raw_os_error(), Some(libc::ENOSYS), "{err}");
        return;
    }
    // SAFETY: list is valid until freed, with n entries.
    unsafe { ibv_free_device_list(list) };
    if in_guest {
        assert!(n >= 2, "the guest has rxe0 and rxe1, found {n}");
    } else {
        assert_eq!(n, 0, "the host has no RDMA devices");
    }
    let _ = ptr::null::<ibv_device>();
}
