//! A device context: `ibv_open_device(3)` / `ibv_close_device(3)`, its
//! queries, and the table of objects its events may name.

use std::fmt;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::Arc;

use libibverbs_sys as sys;

use crate::attr::{DeviceAttr, Gid, GidEntry, GidType, PortAttr};
use crate::cq::CqInner;
use crate::device::DeviceList;
use crate::error::{check_ptr, check_rc, Error, ObjectKind, Result};
use crate::fd::set_nonblocking;
use crate::qp::QpInner;
use crate::registry::{handle, Describe, Destroy, ObjectId, Table};
use crate::srq::SrqInner;

/// The shared part of a [`Context`]: every object created from the context
/// holds an `Arc` of it, so the device is closed only after the last of
/// them is destroyed (`ibv_close_device(3)`: it "does not release all the
/// resources allocated using context"; they must go first).
pub(crate) struct ContextInner {
    raw: NonNull<sys::ibv_context>,
    id: ObjectId,
    name: String,
    ports: u8,
    closed: bool,
    pub(crate) cqs: Table<CqInner>,
    pub(crate) qps: Table<QpInner>,
    pub(crate) srqs: Table<SrqInner>,
}

// SAFETY: libibverbs objects may be used from any thread ("By default all
// verbs objects are safe for multi-threaded access", ibv_alloc_td(3)); the
// Rust-side fields are immutable after construction or behind Mutexes.
unsafe impl Send for ContextInner {}
// SAFETY: as for Send: every verb taking the context is thread-safe.
unsafe impl Sync for ContextInner {}

impl ContextInner {
    pub(crate) fn raw(&self) -> *mut sys::ibv_context {
        self.raw.as_ptr()
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn async_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: async_fd is set by ibv_open_device and stays open until
        // ibv_close_device, which runs only when this value is dropped; the
        // returned borrow cannot outlive &self.
        unsafe { BorrowedFd::borrow_raw((*self.raw.as_ptr()).async_fd) }
    }

    fn check_port(&self, port: u8) -> Result<()> {
        if port == 0 || port > self.ports {
            return Err(Error::PortOutOfRange {
                port,
                ports: self.ports,
            });
        }
        Ok(())
    }

    fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.check_port(port)?;
        // SAFETY: ibv_port_attr is plain data; all-zero is a valid value.
        let mut attr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: ___ibv_query_port (the inline behind the ibv_query_port
        // macro) fills the caller's ibv_port_attr of the current layout for
        // a valid context and port (ibv_query_port(3)); both are valid here.
        let rc = unsafe { sys::___ibv_query_port(self.raw(), port, &mut attr) };
        check_rc("ibv_query_port", rc)?;
        Ok(PortAttr(attr))
    }

    pub(crate) fn query_gid_entry(&self, port: u8, index: u32) -> Result<Option<GidEntry>> {
        self.check_port(port)?;
        // SAFETY: ibv_gid_entry is plain data; all-zero is a valid value.
        let mut entry: sys::ibv_gid_entry = unsafe { std::mem::zeroed() };
        // SAFETY: ibv_query_gid_ex(3) fills `entry` for a valid context,
        // port and index; flags must be 0.
        let rc = unsafe { sys::ibv_query_gid_ex(self.raw(), port.into(), index, &mut entry, 0) };
        match rc {
            0 => Ok(Some(GidEntry::from_raw(&entry))),
            // "ENODATA if the GID entry is not valid" (an empty slot).
            rc => match check_rc("ibv_query_gid_ex", rc) {
                Err(e) if e.errno() == Some(crate::Errno::NODATA) => Ok(None),
                other => other.map(|()| None),
            },
        }
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        // SAFETY: every child object holds an Arc of this value, so all of
        // them are destroyed: one whose destroy failed keeps its Arc (and
        // those of its parents) for ever, so this does not run. Closed
        // exactly once.
        unsafe { sys::ibv_close_device(self.raw()) };
    }
}

impl Destroy for ContextInner {
    const KIND: ObjectKind = ObjectKind::Context;

    fn destroy_now(&mut self) -> Result<()> {
        // SAFETY: as in Drop: no child is left, since each holds an Arc.
        unsafe { sys::ibv_close_device(self.raw()) };
        // The context is released whatever ibv_close_device returns (it
        // frees the provider's context unconditionally and returns 0:
        // libibverbs/device.c 442-450 in rdma-core 44), so there is nothing
        // to hand back and nothing the caller could do about an error.
        self.closed = true;
        Ok(())
    }
}

/// An open RDMA device: `ibv_open_device()`.
///
/// A cheap handle (an `Arc`): clones refer to the same context. The device
/// is closed when the last clone and the last object created from it are
/// gone, or by [`close`](Context::close).
///
/// The context is where asynchronous events are read: see
/// [`get_async_event`](Context::get_async_event).
///
/// ```no_run
/// # fn main() -> ibverbs_async::Result<()> {
/// use ibverbs_async::Context;
/// let ctx = Context::open("rxe0")?;
/// let port = ctx.query_port(1)?;
/// println!("{} port 1: {:?}, {:?}", ctx.name(), port.state(), port.active_mtu());
/// # Ok(()) }
/// ```
// Send + Sync through Arc<ContextInner>: see the `unsafe impl`s on ContextInner
// for why the C object may be used and dropped from any thread.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl Context {
    /// Opens the device named `name` (e.g. `"rxe0"`).
    ///
    /// # Errors
    /// [`Error::NoRdmaSupport`] / [`Error::NoDevices`] as
    /// [`DeviceList::new`], [`Error::NoSuchDevice`] when no device has that
    /// name, [`Error::Call`] when opening fails.
    pub fn open(name: &str) -> Result<Context> {
        let list = DeviceList::new()?;
        let device = list.find(name)?;
        device.open()
    }

    pub(crate) fn from_device(device: NonNull<sys::ibv_device>) -> Result<Context> {
        // SAFETY: the device comes from a live device list (the caller's
        // Device borrows it); ibv_open_device(3) returns NULL with errno set
        // on failure.
        let raw = check_ptr("ibv_open_device", unsafe {
            sys::ibv_open_device(device.as_ptr())
        })?;
        // SAFETY: the device is valid (see above); the name is a
        // NUL-terminated string inside it.
        let name = unsafe {
            let p = sys::ibv_get_device_name(device.as_ptr());
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        let mut inner = ContextInner {
            raw,
            id: ObjectId::next(),
            name,
            ports: 0,
            closed: false,
            cqs: Table::new(),
            qps: Table::new(),
            srqs: Table::new(),
        };
        let attr = query_device(&inner)?;
        inner.ports = attr.phys_port_cnt();
        // ibv_get_async_event(3): "the user may change the blocking mode of
        // the file descriptor (asynchronous event file descriptor) using
        // fcntl" — done once here; blocking gets poll first.
        set_nonblocking(inner.async_fd())?;
        Ok(Context {
            inner: Arc::new(inner),
        })
    }

    /// The device name, e.g. `"rxe0"`.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Number of physical ports; valid port numbers are `1..=port_count()`.
    #[must_use]
    pub fn port_count(&self) -> u8 {
        self.inner.ports
    }

    /// Device attributes (`ibv_query_device()`).
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_query_device` fails.
    #[doc(alias = "ibv_query_device")]
    pub fn query_device(&self) -> Result<DeviceAttr> {
        query_device(&self.inner)
    }

    /// Port attributes (`ibv_query_port()`, through the header's inline
    /// `___ibv_query_port`, which fills the current `struct ibv_port_attr`
    /// layout rather than the compatibility one).
    ///
    /// # Errors
    /// [`Error::PortOutOfRange`] for a port outside `1..=port_count()`.
    #[doc(alias = "ibv_query_port")]
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.inner.query_port(port)
    }

    /// The GID at `index` of `port`'s table (`ibv_query_gid()`).
    ///
    /// # Errors
    /// [`Error::PortOutOfRange`] for a port outside `1..=port_count()`;
    /// [`Error::TooLarge`] for an index over the C `int`; [`Error::Call`] when
    /// `ibv_query_gid` fails (an index past the table).
    #[doc(alias = "ibv_query_gid")]
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        self.inner.check_port(port)?;
        let index = crate::cq::c_int_arg("GID index", index)?;
        let mut gid = Gid::default().to_raw();
        // SAFETY: ibv_query_gid(3) fills the caller's ibv_gid for a valid
        // context and port.
        let rc = unsafe { sys::ibv_query_gid(self.inner.raw(), port, index, &mut gid) };
        check_rc("ibv_query_gid", rc)?;
        Ok(Gid::from_raw(gid))
    }

    /// The GID table entry at `index` of `port` with its type
    /// (`ibv_query_gid_ex()`); `None` for an empty slot.
    ///
    /// # Errors
    /// [`Error::PortOutOfRange`] for a port outside `1..=port_count()`;
    /// [`Error::Call`] when `ibv_query_gid_ex` fails for another reason than an
    /// empty slot.
    #[doc(alias = "ibv_query_gid_ex")]
    pub fn query_gid_entry(&self, port: u8, index: u32) -> Result<Option<GidEntry>> {
        self.inner.query_gid_entry(port, index)
    }

    /// The first entry of `port`'s GID table that `pred` accepts, scanning
    /// from index 0 and stopping at the first match.
    ///
    /// # Errors
    /// As [`query_port`](Context::query_port) and
    /// [`query_gid_entry`](Context::query_gid_entry).
    pub fn find_gid(
        &self,
        port: u8,
        mut pred: impl FnMut(&GidEntry) -> bool,
    ) -> Result<Option<GidEntry>> {
        let len = self.query_port(port)?.gid_tbl_len();
        for index in 0..len {
            if let Some(entry) = self.inner.query_gid_entry(port, index)? {
                if pred(&entry) {
                    return Ok(Some(entry));
                }
            }
        }
        Ok(None)
    }

    /// The first RoCE v2 GID of `port` that is an IPv4-mapped address
    /// (`::ffff:a.b.c.d`): the one to use for RoCE v2 traffic over IPv4.
    ///
    /// # Errors
    /// As [`find_gid`](Context::find_gid).
    pub fn ipv4_gid(&self, port: u8) -> Result<Option<GidEntry>> {
        self.find_gid(port, |e| {
            e.gid_type == GidType::RoceV2 && e.gid.to_ipv4_mapped().is_some()
        })
    }

    /// Number of CQs, QPs and SRQs of this context that are alive or being
    /// destroyed (entries of the table events are resolved with).
    #[must_use]
    pub fn live_objects(&self) -> usize {
        self.inner.cqs.len() + self.inner.qps.len() + self.inner.srqs.len()
    }
}

handle! {
    Context(ContextInner), what = "context",
    /// Closes the device now (`ibv_close_device()`). Dropping the last
    /// handle closes it too, once every object created from it is gone.
    fn close = "ibv_close_device"
}

impl std::os::fd::AsRawFd for Context {
    /// The asynchronous event fd's number (see [`Context::async_fd`], which
    /// also gives it, and why it is not handed out as a `BorrowedFd`).
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.inner.async_fd().as_raw_fd()
    }
}

fn query_device(inner: &ContextInner) -> Result<DeviceAttr> {
    // SAFETY: ibv_device_attr is plain data; all-zero is a valid value.
    let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: ibv_query_device(3) fills the caller's struct for a valid
    // context.
    let rc = unsafe { sys::ibv_query_device(inner.raw(), &mut attr) };
    check_rc("ibv_query_device", rc)?;
    Ok(DeviceAttr(attr))
}

impl Describe for ContextInner {
    fn describe(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("name", &self.name).field("ports", &self.ports);
    }
}
