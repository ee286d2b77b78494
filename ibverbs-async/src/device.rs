//! The list of RDMA devices: `ibv_get_device_list(3)`.

use std::ffi::CStr;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

use libibverbs_sys as sys;

use crate::context::Context;
use crate::error::{check_ptr, Errno, Error, Result};

/// The RDMA devices present, from `ibv_get_device_list()`.
///
/// The list owns the array libibverbs returned and frees it with
/// `ibv_free_device_list()` on drop; the [`Device`]s it hands out borrow it,
/// because a device pointer that was not opened is invalid once the list is
/// freed (`ibv_get_device_list(3)`).
///
/// ```no_run
/// # fn main() -> ibverbs_async::Result<()> {
/// let list = ibverbs_async::DeviceList::new()?;
/// for dev in list.iter() {
///     println!("{} {:016x}", dev.name(), dev.guid());
/// }
/// # Ok(()) }
/// ```
#[doc(alias = "ibv_get_device_list")]
pub struct DeviceList {
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
}

// SAFETY: the array is plain memory owned by this value, and the ibv_device
// structures it points to are read-only descriptions that libibverbs never
// changes after listing; libibverbs is thread-safe (ibv_alloc_td(3): "By
// default all verbs objects are safe for multi-threaded access"), so the list
// can be used and freed from any thread.
unsafe impl Send for DeviceList {}
// SAFETY: see Send; shared access only reads.
unsafe impl Sync for DeviceList {}

impl DeviceList {
    /// Lists the RDMA devices.
    ///
    /// # Errors
    /// - [`Error::NoRdmaSupport`] when the kernel has no RDMA support
    ///   (`ibv_get_device_list` fails with `ENOSYS`),
    /// - [`Error::NoDevices`] when the kernel supports RDMA but has no device,
    /// - [`Error::Call`] for any other failure.
    #[doc(alias = "ibv_get_device_list")]
    pub fn new() -> Result<DeviceList> {
        let mut n: libc::c_int = 0;
        // SAFETY: ibv_get_device_list(3) takes an optional out-pointer for
        // the count, which points to a live c_int here; it returns NULL with
        // errno set on failure, else an array we own until
        // ibv_free_device_list().
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        let list = check_ptr("ibv_get_device_list", list).map_err(|e| match e.errno() {
            Some(Errno::NOSYS) => Error::NoRdmaSupport,
            _ => e,
        })?;
        let list = DeviceList {
            list,
            len: usize::try_from(n).unwrap_or(0),
        };
        if list.len == 0 {
            return Err(Error::NoDevices);
        }
        Ok(list)
    }

    /// The number of devices.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty (never true for a list [`new`](Self::new)
    /// returned).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device at `index`.
    #[must_use]
    pub fn get(&self, index: usize) -> Option<Device<'_>> {
        if index >= self.len {
            return None;
        }
        // SAFETY: the array has `len` valid entries followed by NULL
        // (ibv_get_device_list(3)); index < len.
        let raw = unsafe { *self.list.as_ptr().add(index) };
        NonNull::new(raw).map(|raw| Device {
            raw,
            _list: PhantomData,
        })
    }

    /// The devices, in the order libibverbs lists them.
    pub fn iter(&self) -> impl Iterator<Item = Device<'_>> + '_ {
        (0..self.len).filter_map(move |i| self.get(i))
    }

    /// The device named `name` (as in `ibv_devices`, e.g. `"rxe0"`).
    ///
    /// # Errors
    /// [`Error::NoSuchDevice`] naming the devices present.
    pub fn find(&self, name: &str) -> Result<Device<'_>> {
        self.iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| Error::NoSuchDevice {
                name: name.to_owned(),
                available: self.names().join(", "),
            })
    }

    /// The names of all devices.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.iter().map(|d| d.name().to_owned()).collect()
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the array came from ibv_get_device_list and is freed once;
        // the Devices borrowed from it are gone (they borrow self), and
        // contexts opened from them stay valid after the free
        // (ibv_free_device_list(3)).
        unsafe { sys::ibv_free_device_list(self.list.as_ptr()) };
    }
}

impl fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One RDMA device of a [`DeviceList`].
#[derive(Clone, Copy)]
pub struct Device<'list> {
    raw: NonNull<sys::ibv_device>,
    _list: PhantomData<&'list DeviceList>,
}

// SAFETY: a read-only description owned by the list it borrows; see
// DeviceList.
unsafe impl Send for Device<'_> {}
// SAFETY: as for Send.
unsafe impl Sync for Device<'_> {}

impl<'list> Device<'list> {
    /// The kernel name of the device (`ibv_get_device_name()`), e.g. `rxe0`.
    #[doc(alias = "ibv_get_device_name")]
    #[must_use]
    pub fn name(&self) -> &'list str {
        // SAFETY: the device is valid while the list lives ('list), and
        // ibv_get_device_name(3) returns a pointer into it, NUL-terminated.
        let name = unsafe { sys::ibv_get_device_name(self.raw.as_ptr()) };
        if name.is_null() {
            return "";
        }
        // SAFETY: non-NULL, NUL-terminated, lives as long as the device.
        unsafe { CStr::from_ptr(name) }.to_str().unwrap_or("")
    }

    /// The node GUID in host byte order (`ibv_get_device_guid()`).
    #[doc(alias = "ibv_get_device_guid")]
    #[must_use]
    pub fn guid(&self) -> u64 {
        // SAFETY: the device is valid while the list lives.
        u64::from_be(unsafe { sys::ibv_get_device_guid(self.raw.as_ptr()) })
    }

    /// Opens the device (`ibv_open_device()`).
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_open_device` or `ibv_query_device` fails;
    /// [`Error::System`] when the event fd cannot be made non-blocking.
    pub fn open(&self) -> Result<Context> {
        Context::from_device(self.raw)
    }
}

impl fmt::Debug for Device<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name())
            .field("guid", &format_args!("{:016x}", self.guid()))
            .finish()
    }
}

/// Lists the RDMA devices (shorthand for [`DeviceList::new`]).
///
/// # Errors
/// See [`DeviceList::new`]: on a kernel without RDMA this is
/// [`Error::NoRdmaSupport`].
pub fn devices() -> Result<DeviceList> {
    DeviceList::new()
}
