//! Atomic operations (`fi_atomic(3)`) on integers in a peer's memory
//! region: the operands, compare values and results live in one pool
//! [`Buffer`] moved into the provider, as with sends; the target is a
//! [`RemoteRegion`] and an offset into it, checked before the call, and the
//! operation is first checked with the provider (`fi_atomicvalid`,
//! `fi_fetch_atomicvalid`, `fi_compare_atomicvalid`).
//!
//! ```
//! use libfabric::ep::atomic::AtomicOp;
//! use libfabric::mr::{MemoryRegion, MrAccess};
//! use libfabric::prelude::*;
//! let hints = Hints::new()
//!     .provider("tcp;ofi_rxm")
//!     .node("127.0.0.1")
//!     .caps(Caps::MSG | Caps::RMA | Caps::ATOMIC);
//! let (a, b) = (Rdm::open(&hints, 1)?, Rdm::open(&hints, 1)?);
//! let to_b = a.insert(&b.name()?)?;
//! // b's counter, which peers may add to.
//! let mut counter = MemoryRegion::register(
//!     b.domain(),
//!     vec![0u8; 8],
//!     MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
//! )?;
//! counter.write_at(0, &40u64.to_ne_bytes())?;
//! let remote = counter.remote();
//! // a adds 2 and fetches the value before: operand, then room for the result.
//! let pool = a.buffer_pool(1, 64)?;
//! let mut buf = pool.take().unwrap();
//! buf[..8].copy_from_slice(&2u64.to_ne_bytes());
//! while let Err((back, e)) = a.endpoint().fetch_atomic::<u64>(buf, 1, AtomicOp::Sum, &remote, 0, to_b) {
//!     assert!(e.is_again(), "{e}"); // rxm connects on first use
//!     buf = back;
//!     let _ = a.cq().read(&mut [Default::default()])?;
//!     let _ = b.cq().read(&mut [Default::default()])?;
//! }
//! let done = loop {
//!     match a.wait_one(&pool, Some(std::time::Duration::from_millis(1))) {
//!         Err(libfabric::Error::TimedOut { .. }) => {}
//!         done => break done?,
//!     }
//!     let _ = b.cq().read(&mut [Default::default()])?;
//! };
//! let buf = done.buffer.unwrap();
//! assert_eq!(u64::from_ne_bytes(buf[8..16].try_into().unwrap()), 40);
//! let mut now = [0u8; 8];
//! counter.read_at(0, &mut now)?;
//! assert_eq!(u64::from_ne_bytes(now), 42);
//! # Ok::<(), libfabric::Error>(())
//! ```

use super::rma::RMA_READY;
use super::Endpoint;
use crate::buffer::Buffer;
use crate::cq::Addr;
use crate::error::{Error, Handback, Result};
use crate::info::Caps;
use crate::mr::RemoteRegion;
use libfabric_sys::fabric as sys;

mod sealed {
    pub trait Sealed {}
}

/// An integer type the atomic operations work on, with its libfabric
/// datatype (`FI_UINT8` .. `FI_INT64`). Sealed.
pub trait AtomicType: sealed::Sealed + Copy {
    /// The `enum fi_datatype` value.
    const DATATYPE: sys::fi_datatype;
}

macro_rules! atomic_type {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl AtomicType for $t {
            const DATATYPE: sys::fi_datatype = sys::$d;
        }
    )*};
}

atomic_type!(
    u8 => FI_UINT8, u16 => FI_UINT16, u32 => FI_UINT32, u64 => FI_UINT64,
    i8 => FI_INT8, i16 => FI_INT16, i32 => FI_INT32, i64 => FI_INT64
);

/// An operation of [`Endpoint::atomic`] and [`Endpoint::fetch_atomic`]
/// (`enum fi_op`): the target becomes `target OP operand`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// `FI_MIN`.
    Min,
    /// `FI_MAX`.
    Max,
    /// `FI_SUM`.
    Sum,
    /// `FI_PROD`.
    Prod,
    /// `FI_LOR`.
    Lor,
    /// `FI_LAND`.
    Land,
    /// `FI_BOR`.
    Bor,
    /// `FI_BAND`.
    Band,
    /// `FI_LXOR`.
    Lxor,
    /// `FI_BXOR`.
    Bxor,
    /// `FI_ATOMIC_WRITE`: the target becomes the operand.
    Write,
    /// `FI_ATOMIC_READ` (fetch only): the target is read, not changed.
    Read,
}

impl AtomicOp {
    fn raw(self) -> sys::fi_op {
        match self {
            AtomicOp::Min => sys::FI_MIN,
            AtomicOp::Max => sys::FI_MAX,
            AtomicOp::Sum => sys::FI_SUM,
            AtomicOp::Prod => sys::FI_PROD,
            AtomicOp::Lor => sys::FI_LOR,
            AtomicOp::Land => sys::FI_LAND,
            AtomicOp::Bor => sys::FI_BOR,
            AtomicOp::Band => sys::FI_BAND,
            AtomicOp::Lxor => sys::FI_LXOR,
            AtomicOp::Bxor => sys::FI_BXOR,
            AtomicOp::Write => sys::FI_ATOMIC_WRITE,
            AtomicOp::Read => sys::FI_ATOMIC_READ,
        }
    }
}

/// An operation of [`Endpoint::compare_atomic`] (`enum fi_op`): the target
/// becomes the operand where the comparison with the compare value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareOp {
    /// `FI_CSWAP`: where `compare == target`.
    Cswap,
    /// `FI_CSWAP_NE`: where `compare != target`.
    CswapNe,
    /// `FI_CSWAP_LE`: where `compare <= target`.
    CswapLe,
    /// `FI_CSWAP_LT`: where `compare < target`.
    CswapLt,
    /// `FI_CSWAP_GE`: where `compare >= target`.
    CswapGe,
    /// `FI_CSWAP_GT`: where `compare > target`.
    CswapGt,
    /// `FI_MSWAP`: the bits of `compare` (a mask) are taken from the
    /// operand.
    Mswap,
}

impl CompareOp {
    fn raw(self) -> sys::fi_op {
        match self {
            CompareOp::Cswap => sys::FI_CSWAP,
            CompareOp::CswapNe => sys::FI_CSWAP_NE,
            CompareOp::CswapLe => sys::FI_CSWAP_LE,
            CompareOp::CswapLt => sys::FI_CSWAP_LT,
            CompareOp::CswapGe => sys::FI_CSWAP_GE,
            CompareOp::CswapGt => sys::FI_CSWAP_GT,
            CompareOp::Mswap => sys::FI_MSWAP,
        }
    }
}

/// Which of the three atomic calls.
#[derive(Clone, Copy)]
enum Kind {
    Plain,
    Fetch,
    Compare,
}

impl Kind {
    /// Arrays of `count` values the buffer holds: operands; results;
    /// compare values.
    fn arrays(self) -> usize {
        match self {
            Kind::Plain => 1,
            Kind::Fetch => 2,
            Kind::Compare => 3,
        }
    }
}

impl<TM: crate::threading::ThreadModel> Endpoint<TM> {
    /// The checks of an atomic call; returns the remote address, the
    /// peer's and the bytes of one array of `count` values.
    #[allow(clippy::too_many_arguments)]
    fn check_atomic<T: AtomicType>(
        &self,
        call: &'static str,
        kind: Kind,
        op: sys::fi_op,
        initiator: Caps,
        buffer: &Buffer,
        count: usize,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> Result<(u64, u64, usize)> {
        let caps = self.inner.info.caps();
        let roles = Caps::READ | Caps::WRITE | Caps::REMOTE_READ | Caps::REMOTE_WRITE;
        if !caps.contains(Caps::ATOMIC) || (caps.intersects(roles) && !caps.contains(initiator)) {
            return Err(Error::MissingCapability {
                call,
                needed: Caps::ATOMIC | initiator,
            });
        }
        if crate::quirks::atomics_unverified(self.inner.info.provider()) {
            return Err(Error::Unsupported {
                call,
                reason: "verbs' atomics did not complete over soft-RoCE in this crate's tests: refused rather than left to hang a wait",
            });
        }
        self.ready(call, RMA_READY)?;
        self.check_buffer(call, buffer)?;
        if count == 0 {
            return Err(Error::InvalidArgument(
                format!("{call}: an atomic operation needs at least one value").into(),
            ));
        }
        let size = std::mem::size_of::<T>();
        let bytes = count.checked_mul(size).ok_or(Error::TooLarge {
            what: "atomic values (count x size)",
            limit: usize::MAX,
            given: usize::MAX,
        })?;
        let needed = bytes.checked_mul(kind.arrays()).ok_or(Error::TooLarge {
            what: "atomic buffer bytes",
            limit: usize::MAX,
            given: usize::MAX,
        })?;
        if needed > buffer.len() {
            return Err(Error::BufferTooSmall {
                what: "atomic buffer (operands, results, compare values)",
                needed,
                given: buffer.len(),
            });
        }
        let mut max = 0usize;
        // SAFETY: fi_atomic(3) fi_*atomicvalid on an enabled endpoint
        // granted FI_ATOMIC (checked above: a provider that grants it sets
        // the endpoint's atomic operations, which the inline calls); `max`
        // is written on success.
        let ret = unsafe {
            match kind {
                Kind::Plain => sys::fi_atomicvalid(self.raw(), T::DATATYPE, op, &mut max),
                Kind::Fetch => sys::fi_fetch_atomicvalid(self.raw(), T::DATATYPE, op, &mut max),
                Kind::Compare => sys::fi_compare_atomicvalid(self.raw(), T::DATATYPE, op, &mut max),
            }
        };
        if ret != 0 {
            return Err(Error::Unsupported {
                call,
                reason: "the provider does not offer this atomic operation on this type \
                       (fi_*atomicvalid)",
            });
        }
        if count > max {
            return Err(Error::TooLarge {
                what: "atomic values in one call (fi_*atomicvalid count)",
                limit: max,
                given: count,
            });
        }
        let addr = remote.target_address(offset, bytes, self.inner.domain.info.mr_mode())?;
        if addr % size as u64 != 0 {
            return Err(Error::InvalidArgument(
                format!("{call}: the remote address {addr:#x} is not aligned to {size} bytes")
                    .into(),
            ));
        }
        let dest = self.check_peer(call, dest, false)?;
        Ok((addr, dest, bytes))
    }

    /// `fi_atomic`: applies `op` with the `count` values of type `T` at the
    /// start of `buffer` (native byte order) to `count` values of the
    /// peer's `remote` region at `offset`. The buffer moves into the
    /// provider and comes back with the completion (transmit queue).
    ///
    /// # Errors
    /// Each with the buffer handed back: [`Error::MissingCapability`]
    /// without `FI_ATOMIC` (or with roles that leave out `FI_WRITE`);
    /// [`Error::State`] as for [`write`](Self::write);
    /// [`Error::Unsupported`] when the provider lacks `op` on `T`
    /// (`fi_atomicvalid`); [`Error::TooLarge`] for `count` over what it
    /// takes in one call, or a range past the remote region;
    /// [`Error::BufferTooSmall`] when the buffer cannot hold `count`
    /// values; [`Error::InvalidArgument`] for a `count` of 0, a remote
    /// address not aligned to `T`, or a `dest` not in the bound address
    /// vector; [`Error::ForeignObject`] for a buffer of another domain;
    /// [`Error::Call`] when `fi_atomic` fails.
    #[doc(alias = "fi_atomic")]
    #[allow(clippy::too_many_arguments)]
    pub fn atomic<T: AtomicType>(
        &self,
        buffer: Buffer,
        count: usize,
        op: AtomicOp,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> Handback<Buffer> {
        let (addr, dest, _) = match self.check_atomic::<T>(
            "fi_atomic",
            Kind::Plain,
            op.raw(),
            Caps::WRITE,
            &buffer,
            count,
            remote,
            offset,
            dest,
        ) {
            Ok(checked) => checked,
            Err(error) => return Err((buffer, error)),
        };
        // fi_atomic(3): the operands (count values of the datatype, within
        // the registered buffer: desc) are read until the completion.
        post!(self, "fi_atomic", false, buffer, |p| sys::fi_atomic(
            self.raw(),
            p.addr,
            count,
            p.desc,
            dest,
            addr,
            remote.key,
            T::DATATYPE,
            op.raw(),
            p.context
        ))
    }

    /// `fi_fetch_atomic`: [`atomic`](Self::atomic) that also returns the
    /// target's values from before the operation. The buffer holds the
    /// `count` operands (ignored by [`AtomicOp::Read`]), then room for the
    /// `count` results: they are at byte `count * size_of::<T>()` of the
    /// buffer that comes back with the completion.
    ///
    /// # Errors
    /// As [`atomic`](Self::atomic), with `fi_fetch_atomic` as the call,
    /// `fi_fetch_atomicvalid` deciding support, and `FI_READ` (and
    /// `FI_WRITE`, but for `Read`) as the roles needed.
    #[doc(alias = "fi_fetch_atomic")]
    #[allow(clippy::too_many_arguments)]
    pub fn fetch_atomic<T: AtomicType>(
        &self,
        buffer: Buffer,
        count: usize,
        op: AtomicOp,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> Handback<Buffer> {
        let roles = if op == AtomicOp::Read {
            Caps::READ
        } else {
            Caps::READ | Caps::WRITE
        };
        let (addr, dest, bytes) = match self.check_atomic::<T>(
            "fi_fetch_atomic",
            Kind::Fetch,
            op.raw(),
            roles,
            &buffer,
            count,
            remote,
            offset,
            dest,
        ) {
            Ok(checked) => checked,
            Err(error) => return Err((buffer, error)),
        };
        // fi_atomic(3): operands and results are disjoint ranges of the
        // registered buffer (2 x bytes <= its length, checked), both
        // described by its desc; the provider writes the results until the
        // completion, while it owns the buffer.
        post!(self, "fi_fetch_atomic", false, buffer, |p| {
            sys::fi_fetch_atomic(
                self.raw(),
                p.addr,
                count,
                p.desc,
                p.addr.cast::<u8>().add(bytes).cast(),
                p.desc,
                dest,
                addr,
                remote.key,
                T::DATATYPE,
                op.raw(),
                p.context,
            )
        })
    }

    /// `fi_compare_atomic`: compares the target's values with compare
    /// values and, where `op`'s condition holds, stores the operands;
    /// returns the target's values from before. The buffer holds the
    /// `count` operands, then the `count` compare values, then room for
    /// the `count` results: they are at byte `2 * count * size_of::<T>()`
    /// of the buffer that comes back with the completion.
    ///
    /// # Errors
    /// As [`atomic`](Self::atomic), with `fi_compare_atomic` as the call,
    /// `fi_compare_atomicvalid` deciding support, and `FI_READ | FI_WRITE`
    /// as the roles needed.
    #[doc(alias = "fi_compare_atomic")]
    #[allow(clippy::too_many_arguments)]
    pub fn compare_atomic<T: AtomicType>(
        &self,
        buffer: Buffer,
        count: usize,
        op: CompareOp,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> Handback<Buffer> {
        let (addr, dest, bytes) = match self.check_atomic::<T>(
            "fi_compare_atomic",
            Kind::Compare,
            op.raw(),
            Caps::READ | Caps::WRITE,
            &buffer,
            count,
            remote,
            offset,
            dest,
        ) {
            Ok(checked) => checked,
            Err(error) => return Err((buffer, error)),
        };
        // fi_atomic(3): operands, compare values and results are disjoint
        // ranges of the registered buffer (3 x bytes <= its length,
        // checked), all described by its desc.
        post!(self, "fi_compare_atomic", false, buffer, |p| {
            let base = p.addr.cast::<u8>();
            sys::fi_compare_atomic(
                self.raw(),
                p.addr,
                count,
                p.desc,
                base.add(bytes).cast(),
                p.desc,
                base.add(2 * bytes).cast(),
                p.desc,
                dest,
                addr,
                remote.key,
                T::DATATYPE,
                op.raw(),
                p.context,
            )
        })
    }
}
