//! The C baselines of `bench/baselines.c` (compiled by `build.rs`), run on
//! queues opened through the Rust API so that C and Rust work on the very
//! same objects. Shared by the benchmark and the C/Rust parity tests.

use libfabric::cq::Msg;
use libfabric::{CompletionQueue, EventQueue, Fabric};
use libfabric_sys::fabric as sys;
use std::ffi::{c_int, c_void};

mod ffi {
    use super::*;

    unsafe extern "C" {
        pub fn bl_event_buf_len() -> usize;
        pub fn bl_cq_batch() -> usize;
        pub fn bl_cq_read(cq: *mut sys::fid_cq) -> isize;
        pub fn bl_eq_write(eq: *mut sys::fid_eq, context: *mut c_void, data: u64) -> isize;
        pub fn bl_eq_read(
            eq: *mut sys::fid_eq,
            event: *mut u32,
            fid: *mut *mut c_void,
            context: *mut *mut c_void,
            data: *mut u64,
        ) -> isize;
        pub fn bl_trywait(
            fabric: *mut sys::fid_fabric,
            eq: *mut sys::fid_eq,
            cq: *mut sys::fid_cq,
        ) -> c_int;
        pub fn bl_cq_max_batch() -> usize;
        pub fn bl_connreq_data() -> usize;
        pub fn bl_cq_read_empty(cq: *mut sys::fid_cq, iters: u64, batch: usize) -> i64;
        pub fn bl_eq_write_notifies(eq: *mut sys::fid_eq, n: u64) -> i64;
        pub fn bl_eq_write_connreqs(eq: *mut sys::fid_eq, n: u64) -> i64;
        pub fn bl_eq_read_connreq(eq: *mut sys::fid_eq, iters: u64, batch: u64) -> i64;
        pub fn bl_eq_write_read(eq: *mut sys::fid_eq, iters: u64) -> i64;
        pub fn bl_eq_read_queued(eq: *mut sys::fid_eq, iters: u64, batch: u64) -> i64;
        pub fn bl_trywait_empty(
            fabric: *mut sys::fid_fabric,
            eq: *mut sys::fid_eq,
            cq: *mut sys::fid_cq,
            iters: u64,
        ) -> i64;
        pub fn bl_wake_sread(
            eq: *mut sys::fid_eq,
            ack_eq: *mut sys::fid_eq,
            iters: u64,
            gap_ns: u64,
            samples: *mut u64,
        ) -> i64;
        pub fn bl_wake_poll(
            fabric: *mut sys::fid_fabric,
            eq: *mut sys::fid_eq,
            ack_eq: *mut sys::fid_eq,
            iters: u64,
            gap_ns: u64,
            samples: *mut u64,
        ) -> i64;
        pub fn bl_rma_open(info: *const sys::fi_info, size: usize, err: *mut c_int) -> *mut c_void;
        pub fn bl_rma_close(pair: *mut c_void);
        pub fn bl_rma_loop(pair: *mut c_void, op: c_int, iters: u64) -> i64;
    }
}

/// A C baseline's result: elapsed nanoseconds, or the negative fi_errno it
/// returned (`-FI_EOTHER` for a call that returned something unexpected).
pub type Timed = Result<u64, i64>;

fn timed(ret: i64) -> Timed {
    u64::try_from(ret).map_err(|_| ret)
}

/// The byte length of the event buffer the C side reads into (the size of
/// the Rust `EventBuf`).
pub fn event_buf_len() -> usize {
    // SAFETY: returns a constant; no arguments.
    unsafe { ffi::bl_event_buf_len() }
}

/// How many completions one C `fi_cq_read` asks for.
pub fn cq_batch() -> usize {
    // SAFETY: returns a constant; no arguments.
    unsafe { ffi::bl_cq_batch() }
}

/// One C `fi_cq_read` of up to [`cq_batch`] entries: its return value.
pub fn cq_read(cq: &CompletionQueue<Msg>) -> isize {
    // SAFETY: fi_cq_read(3) writes at most count entries of the CQ's format;
    // the CQ is FI_CQ_FORMAT_MSG (the type says so) and the C buffer holds
    // bl_cq_batch() fi_cq_msg_entry structs. The borrow keeps the CQ open.
    unsafe { ffi::bl_cq_read(cq.as_raw()) }
}

/// One C `fi_eq_write` of an `FI_NOTIFY` entry naming the EQ: its return value.
pub fn eq_write(eq: &EventQueue, context: usize, data: u64) -> isize {
    // SAFETY: fi_eq_write(3) copies the entry into the queue; the context is
    // only data to the provider. The borrow keeps the EQ open.
    unsafe { ffi::bl_eq_write(eq.as_raw(), context as *mut c_void, data) }
}

/// What one C `fi_eq_read` returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CRead {
    pub ret: isize,
    pub event: u32,
    pub fid: usize,
    pub context: usize,
    pub data: u64,
}

/// One C `fi_eq_read` into a buffer of [`event_buf_len`] bytes.
pub fn eq_read(eq: &EventQueue) -> CRead {
    let (mut event, mut fid, mut context, mut data) =
        (0, std::ptr::null_mut(), std::ptr::null_mut(), 0);
    // SAFETY: fi_eq_read(3) writes at most the C buffer's length; the out
    // pointers are valid locals. The borrow keeps the EQ open.
    let ret =
        unsafe { ffi::bl_eq_read(eq.as_raw(), &mut event, &mut fid, &mut context, &mut data) };
    CRead {
        ret,
        event,
        fid: fid as usize,
        context: context as usize,
        data,
    }
}

/// One C `fi_trywait` over `[eq, cq]`: its return value.
///
/// # Safety
/// `eq` and `cq` must belong to `fabric` (fi_poll(3) takes queues of the
/// fabric given).
pub unsafe fn trywait(fabric: &Fabric, eq: &EventQueue, cq: &CompletionQueue<Msg>) -> c_int {
    // SAFETY: the three objects are open for the borrow; the caller promises
    // the queues are the fabric's.
    unsafe { ffi::bl_trywait(fabric.as_raw(), eq.as_raw(), cq.as_raw()) }
}

/// The largest batch [`cq_read_empty`] takes.
pub fn cq_max_batch() -> usize {
    // SAFETY: returns a constant; no arguments.
    unsafe { ffi::bl_cq_max_batch() }
}

/// Bytes of connection data of the CONNREQ events [`eq_write_connreqs`]
/// queues.
pub fn connreq_data() -> usize {
    // SAFETY: returns a constant; no arguments.
    unsafe { ffi::bl_connreq_data() }
}

/// `iters` C `fi_cq_read`s of `batch` entries (1..=[`cq_max_batch`]) of an
/// empty CQ, each of which must return `-FI_EAGAIN`.
///
/// The same loop measures the queue of an `FI_THREAD_SAFE` domain and that
/// of an `FI_THREAD_DOMAIN` one (`T`): the model is the domain's, given to
/// `fi_domain`, not the loop's.
pub fn cq_read_empty<T: libfabric::ThreadModel>(
    cq: &CompletionQueue<Msg, T>,
    iters: u64,
    batch: usize,
) -> Timed {
    // SAFETY: as in cq_read; the C side refuses a batch over its buffer.
    timed(unsafe { ffi::bl_cq_read_empty(cq.as_raw(), iters, batch) })
}

/// Queues `n` `FI_NOTIFY` events naming the EQ, with data `0..n` (needs
/// room for them and `FI_WRITE`): 0 or a negative fi_errno.
pub fn eq_write_notifies(eq: &EventQueue, n: u64) -> i64 {
    // SAFETY: fi_eq_write(3) copies each entry; the borrow keeps the EQ open.
    unsafe { ffi::bl_eq_write_notifies(eq.as_raw(), n) }
}

/// Queues `n` `FI_CONNREQ` events naming the EQ, with no `fi_info` and
/// [`connreq_data`] bytes of data (byte k of event j is `j + k`).
pub fn eq_write_connreqs(eq: &EventQueue, n: u64) -> i64 {
    // SAFETY: as in eq_write_notifies; info is NULL, so no reader frees
    // anything it did not allocate.
    unsafe { ffi::bl_eq_write_connreqs(eq.as_raw(), n) }
}

/// `iters` C `fi_eq_read`s of CONNREQ events with data, queued `batch` at a
/// time by [`eq_write_connreqs`].
pub fn eq_read_connreq(eq: &EventQueue, iters: u64, batch: u64) -> Timed {
    // SAFETY: as in eq_write_connreqs and eq_read.
    timed(unsafe { ffi::bl_eq_read_connreq(eq.as_raw(), iters, batch) })
}

/// `iters` C `fi_eq_write` + `fi_eq_read` round trips (needs an EQ opened
/// with `FI_WRITE` and no other reader).
pub fn eq_write_read(eq: &EventQueue, iters: u64) -> Timed {
    // SAFETY: as in eq_write and eq_read.
    timed(unsafe { ffi::bl_eq_write_read(eq.as_raw(), iters) })
}

/// `iters` C `fi_eq_read`s of events queued `batch` at a time (the EQ must
/// hold `batch` entries).
pub fn eq_read_queued(eq: &EventQueue, iters: u64, batch: u64) -> Timed {
    // SAFETY: as in eq_write and eq_read.
    timed(unsafe { ffi::bl_eq_read_queued(eq.as_raw(), iters, batch) })
}

/// `iters` C `fi_trywait`s over an empty EQ and CQ, each of which must
/// return `FI_SUCCESS`.
///
/// # Safety
/// As [`trywait`]: the queues must belong to `fabric`.
pub unsafe fn trywait_empty(
    fabric: &Fabric,
    eq: &EventQueue,
    cq: &CompletionQueue<Msg>,
    iters: u64,
) -> Timed {
    // SAFETY: as in trywait; the caller promises the queues are the fabric's.
    timed(unsafe { ffi::bl_trywait_empty(fabric.as_raw(), eq.as_raw(), cq.as_raw(), iters) })
}

fn wake_result(ret: i64) -> Result<(), i64> {
    if ret == 0 {
        Ok(())
    } else {
        Err(ret)
    }
}

/// Wake-up latency in C, one sample per element of `samples`: a writer
/// thread `fi_eq_write`s to `eq` (FD wait object, `FI_WRITE`) `gap_ns` after
/// each acknowledgement on `ack_eq`; this thread blocks in `fi_eq_sread`.
pub fn wake_sread(
    eq: &EventQueue,
    ack_eq: &EventQueue,
    gap_ns: u64,
    samples: &mut [u64],
) -> Result<(), i64> {
    // SAFETY: fi_eq_sread/fi_eq_write(3) on two open FI_THREAD_SAFE EQs,
    // borrowed for the whole call; the C writer thread is joined before it
    // returns. samples has room for iters values.
    wake_result(unsafe {
        ffi::bl_wake_sread(
            eq.as_raw(),
            ack_eq.as_raw(),
            samples.len() as u64,
            gap_ns,
            samples.as_mut_ptr(),
        )
    })
}

/// As [`wake_sread`], with this thread waiting the fi_poll(3) way:
/// `fi_eq_read` until empty, `fi_trywait`, `poll(2)` on the wait fd.
///
/// # Safety
/// `eq` must belong to `fabric`.
pub unsafe fn wake_poll(
    fabric: &Fabric,
    eq: &EventQueue,
    ack_eq: &EventQueue,
    gap_ns: u64,
    samples: &mut [u64],
) -> Result<(), i64> {
    // SAFETY: as in wake_sread; fi_trywait gets the fabric the caller
    // promises eq belongs to, and the wait fd from FI_GETWAIT stays open with
    // the borrowed EQ.
    wake_result(unsafe {
        ffi::bl_wake_poll(
            fabric.as_raw(),
            eq.as_raw(),
            ack_eq.as_raw(),
            samples.len() as u64,
            gap_ns,
            samples.as_mut_ptr(),
        )
    })
}

/// The RMA op of [`CRmaPair::run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmaOp {
    Write = 0,
    Read = 1,
    WriteData = 2,
}

/// The C side's loopback pair of RDM endpoints for the RMA cases, opened
/// and closed by `bench/baselines.c` (`bl_rma_open`, `bl_rma_close`): a
/// fabric, two domains each with an address vector, a `FI_CQ_FORMAT_DATA`
/// queue and an endpoint, a registered buffer on one side and a registered
/// region on the other.
pub struct CRmaPair {
    raw: std::ptr::NonNull<c_void>,
}

impl CRmaPair {
    /// Opens the pair for `info` (an `FI_EP_RDM` entry with `FI_RMA`),
    /// transfers of `size` bytes, and makes one write.
    pub fn open(info: &libfabric::info::InfoEntry, size: usize) -> Result<Self, i64> {
        let mut err: c_int = 0;
        // SAFETY: bl_rma_open reads the fi_info (fi_dupinfo) only during the
        // call; the borrow keeps it alive. It returns NULL or a pair it
        // allocated, which only bl_rma_close frees (in Drop).
        let raw = unsafe { ffi::bl_rma_open(info.as_raw(), size, &mut err) };
        std::ptr::NonNull::new(raw)
            .map(|raw| CRmaPair { raw })
            .ok_or(i64::from(err))
    }

    /// `iters` RMAs of `op`, each posted and waited for.
    pub fn run(&self, op: RmaOp, iters: u64) -> Timed {
        // SAFETY: the pair is open (closed only in Drop) and used by one
        // thread at a time (&self of a !Sync type).
        timed(unsafe { ffi::bl_rma_loop(self.raw.as_ptr(), op as c_int, iters) })
    }
}

impl Drop for CRmaPair {
    fn drop(&mut self) {
        // SAFETY: the pair came from bl_rma_open and is closed once; no RMA
        // is under way (every loop waits for its completions).
        unsafe { ffi::bl_rma_close(self.raw.as_ptr()) }
    }
}
