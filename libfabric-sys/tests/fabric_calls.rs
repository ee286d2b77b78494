//! Calls through the raw bindings alone against the real libfabric and its
//! tcp provider: discovery, fabric, an FI_WAIT_FD event queue, write/read,
//! FI_GETWAIT, fi_trywait and close.

use core::ffi::c_void;
use core::ptr;
use libfabric_sys::fabric::*;
use std::ffi::CString;

fn tcp_info() -> *mut fi_info {
    // SAFETY: fi_allocinfo returns a zeroed fi_info with allocated attrs, or
    // null; fi_getinfo reads the hints and allocates the result list, which
    // the caller releases with fi_freeinfo (fi_getinfo(3)).
    unsafe {
        let hints = fi_allocinfo();
        assert!(!hints.is_null(), "fi_allocinfo failed");
        let prov = CString::new("tcp").unwrap();
        // fi_freeinfo frees prov_name with free(): give it malloc'ed memory.
        (*(*hints).fabric_attr).prov_name = libc::strdup(prov.as_ptr());
        (*(*hints).ep_attr).type_ = FI_EP_MSG;
        (*hints).caps = FI_MSG;
        let node = CString::new("127.0.0.1").unwrap();
        let mut info = ptr::null_mut();
        let ret = fi_getinfo(
            HEADER_VERSION,
            node.as_ptr(),
            ptr::null(),
            0,
            hints,
            &mut info,
        );
        fi_freeinfo(hints);
        assert_eq!(
            ret, 0,
            "fi_getinfo(tcp) failed: {ret}; is libfabric's tcp provider installed (package libfabric1)?"
        );
        assert!(!info.is_null());
        info
    }
}

#[test]
fn runtime_is_at_least_the_header_version() {
    let runtime = runtime_version();
    assert!(
        FI_VERSION_GE(runtime, HEADER_VERSION),
        "runtime libfabric {}.{} is older than the headers {}.{}",
        FI_MAJOR(runtime),
        FI_MINOR(runtime),
        FI_MAJOR(HEADER_VERSION),
        FI_MINOR(HEADER_VERSION)
    );
}

#[test]
fn getinfo_finds_the_tcp_provider() {
    let info = tcp_info();
    // SAFETY: info is a valid list from fi_getinfo, freed once below.
    unsafe {
        let name = std::ffi::CStr::from_ptr((*(*info).fabric_attr).prov_name);
        assert!(
            name.to_str().unwrap().starts_with("tcp"),
            "provider {name:?}"
        );
        assert_eq!((*(*info).ep_attr).type_, FI_EP_MSG);
        fi_freeinfo(info);
    }
}

#[test]
fn event_queue_round_trip_with_fd_wait_and_trywait() {
    let info = tcp_info();
    // SAFETY: each call follows fi_fabric(3), fi_eq(3), fi_poll(3): objects
    // are opened from valid parents, buffers are the full entry size, and
    // everything is closed child first before fi_freeinfo.
    unsafe {
        let mut fabric: *mut fid_fabric = ptr::null_mut();
        assert_eq!(
            fi_fabric((*info).fabric_attr, &mut fabric, ptr::null_mut()),
            0
        );

        let mut attr = fi_eq_attr {
            size: 16,
            wait_obj: FI_WAIT_FD,
            ..Default::default()
        };
        let mut eq: *mut fid_eq = ptr::null_mut();
        assert_eq!(fi_eq_open(fabric, &mut attr, &mut eq, ptr::null_mut()), 0);

        let mut fd: libc::c_int = -1;
        let ret = fi_control(
            &mut (*eq).fid,
            FI_GETWAIT as i32,
            &mut fd as *mut _ as *mut c_void,
        );
        assert_eq!(ret, 0, "FI_GETWAIT");
        assert!(fd >= 0);

        let mut fids = [&mut (*eq).fid as *mut fid];
        assert_eq!(
            fi_trywait(fabric, fids.as_mut_ptr(), 1),
            0,
            "trywait on an empty EQ"
        );

        let written = fi_eq_entry {
            fid: &mut (*fabric).fid,
            context: 0x1234 as *mut c_void,
            data: 42,
        };
        let n = fi_eq_write(
            eq,
            FI_NOTIFY,
            &written as *const _ as *const c_void,
            core::mem::size_of::<fi_eq_entry>(),
            0,
        );
        assert_eq!(n as usize, core::mem::size_of::<fi_eq_entry>());

        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        assert_eq!(libc::poll(&mut pfd, 1, 1000), 1, "the wait fd is readable");
        assert_eq!(
            fi_trywait(fabric, fids.as_mut_ptr(), 1),
            -FI_EAGAIN,
            "trywait with an event queued"
        );

        let mut event = 0u32;
        let mut read = fi_eq_entry::default();
        let n = fi_eq_read(
            eq,
            &mut event,
            &mut read as *mut _ as *mut c_void,
            core::mem::size_of::<fi_eq_entry>(),
            0,
        );
        assert_eq!(n as usize, core::mem::size_of::<fi_eq_entry>());
        assert_eq!(event, FI_NOTIFY);
        assert_eq!(read.data, 42);
        assert_eq!(read.context as usize, 0x1234);
        assert_eq!(read.fid, &mut (*fabric).fid as *mut fid);

        let n = fi_eq_read(
            eq,
            &mut event,
            &mut read as *mut _ as *mut c_void,
            core::mem::size_of::<fi_eq_entry>(),
            0,
        );
        assert_eq!(n, -(FI_EAGAIN as isize), "empty after the read");
        assert_eq!(
            fi_trywait(fabric, fids.as_mut_ptr(), 1),
            0,
            "trywait once drained"
        );

        assert_eq!(fi_close(&mut (*eq).fid), 0);
        assert_eq!(fi_close(&mut (*fabric).fid), 0);
        fi_freeinfo(info);
    }
}

#[test]
fn strerror_names_the_fabric_errors() {
    // SAFETY: fi_strerror returns a static string for any errno.
    let text = unsafe { std::ffi::CStr::from_ptr(fi_strerror(errno::FI_EAVAIL)) };
    assert!(text.to_str().unwrap().contains("available"), "{text:?}");
}
