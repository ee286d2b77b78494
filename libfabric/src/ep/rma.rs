//! RMA posts (`fi_rma(3)`): the local side is a pool [`Buffer`] moved into
//! the provider, as with sends; the remote side a [`RemoteRegion`] and an
//! offset into it, checked before the call.

use super::{
    bad_address, foreign_buffer, not_ready, CqDataFault, Endpoint, CONNECTED, ENABLED, TX_CQ,
};
use crate::buffer::Buffer;
use crate::cq::Addr;
use crate::error::{check, Error, Handback, Result};
use crate::info::{Caps, InfoEntry};
use crate::mr::{RemoteFault, RemoteRegion};
use libfabric_sys::fabric as sys;

/// What an RMA post needs of the endpoint: enabled, a transmit queue (RMA
/// completions are transmit completions), connected.
pub(super) const RMA_READY: u32 = ENABLED | TX_CQ | CONNECTED;

/// What every RMA post checks that is fixed when the endpoint is opened,
/// worked out then.
#[derive(Clone, Copy)]
pub(crate) struct RmaFacts {
    /// The initiator roles (`FI_READ`, `FI_WRITE`) the endpoint's
    /// capabilities grant: none without `FI_RMA`.
    capable: Caps,
    /// Those it may post: none on a domain whose target would not check
    /// ([`crate::quirks::rma_unchecked_at_target`]).
    roles: Caps,
    /// `ep_attr->max_msg_size`.
    max_len: usize,
    /// The highest end of a remote range the domain's `mr_mode` allows
    /// (`crate::mr::max_target_end`).
    max_end: u64,
}

impl RmaFacts {
    pub(crate) fn of(info: &InfoEntry, domain: &InfoEntry) -> RmaFacts {
        let caps = info.caps();
        let initiator = Caps::READ | Caps::WRITE;
        // fi_getinfo(3): FI_RMA with none of READ/WRITE/REMOTE_READ/
        // REMOTE_WRITE means all four; with some, only those.
        let capable = if !caps.contains(Caps::RMA) {
            Caps::empty()
        } else if caps.intersects(initiator | Caps::REMOTE_READ | Caps::REMOTE_WRITE) {
            caps & initiator
        } else {
            initiator
        };
        let unchecked = crate::quirks::rma_unchecked_at_target(domain);
        RmaFacts {
            capable,
            roles: if unchecked { Caps::empty() } else { capable },
            max_len: info.max_msg_size(),
            max_end: crate::mr::max_target_end(domain.mr_mode()),
        }
    }
}

/// An RMA length of 0, or over `max_len`.
#[cold]
#[inline(never)]
fn bad_rma_length(call: &'static str, len: usize, max_len: usize) -> Error {
    if len == 0 {
        return Error::InvalidArgument(
            format!("{call}: an RMA transfer needs at least one byte").into(),
        );
    }
    Error::TooLarge {
        what: "RMA length (ep_attr max_msg_size)",
        limit: max_len,
        given: len,
    }
}

/// Why an RMA post is refused before the provider is called, as its
/// checks find it: each check gives its fault in one place, and
/// `Endpoint::rma_error`, out of line, says it as an [`Error`]. A post with
/// a buffer tells the faults apart only out of line, when it checks again
/// (`Endpoint::rma_checked_again`).
#[derive(Clone, Copy)]
enum RmaFault {
    /// The buffer is registered with another domain.
    ForeignBuffer,
    /// `len` is over the buffer's length.
    BufferTooSmall,
    /// The endpoint may not post this role (`Endpoint::rma_refused`).
    Refused,
    /// The endpoint is not ready: its state then.
    NotReady(u32),
    /// `len` is 0 or over `max_msg_size`.
    Length,
    /// The remote range.
    Remote(RemoteFault),
    /// `dest` is not a live entry of the address vector.
    Peer,
    /// The remote CQ data does not fit.
    CqData(CqDataFault),
}

impl From<RemoteFault> for RmaFault {
    #[inline(always)]
    fn from(fault: RemoteFault) -> Self {
        RmaFault::Remote(fault)
    }
}

/// An RMA post with a buffer: its call, and `fi_writedata`'s data.
#[derive(Clone, Copy)]
enum RmaPost {
    Write,
    Read,
    WriteData(u64),
}

impl RmaPost {
    #[inline(always)]
    fn initiator(self) -> Caps {
        match self {
            RmaPost::Write | RmaPost::WriteData(_) => Caps::WRITE,
            RmaPost::Read => Caps::READ,
        }
    }

    fn call(self) -> &'static str {
        match self {
            RmaPost::Write => "fi_write",
            RmaPost::Read => "fi_read",
            RmaPost::WriteData(_) => "fi_writedata",
        }
    }
}

/// What an RMA post was given, for its refusal to be explained.
#[derive(Clone, Copy)]
struct RmaArgs<'a> {
    call: &'static str,
    initiator: Caps,
    len: usize,
    remote: &'a RemoteRegion,
    dest: Addr,
    data: u64,
}

impl<T: crate::threading::ThreadModel> Endpoint<T> {
    /// The checks every RMA call makes before the provider is called: the
    /// endpoint's state and capability, the provider's own checks at the
    /// target, the length against the provider's limit and the remote
    /// region, and the peer. Returns the remote address and the peer's.
    /// Inlined into each post: what is left out of line is the errors
    /// (`rma_error`).
    #[inline(always)]
    fn check_rma(
        &self,
        initiator: Caps,
        len: usize,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> std::result::Result<(u64, u64), RmaFault> {
        let facts = &self.inner.rma;
        if !facts.roles.contains(initiator) {
            return Err(RmaFault::Refused);
        }
        self.ready_state(RMA_READY).map_err(RmaFault::NotReady)?;
        if len == 0 || len > facts.max_len {
            return Err(RmaFault::Length);
        }
        let addr = remote.target_range(offset, len, facts.max_end)?;
        let dest = self.live_peer(dest, false).ok_or(RmaFault::Peer)?;
        Ok((addr, dest))
    }

    /// The checks of an RMA with a buffer: the buffer's domain and its
    /// length, then those of [`check_rma`](Self::check_rma).
    #[inline(always)]
    fn check_rma_buffer(
        &self,
        initiator: Caps,
        buffer: &Buffer,
        len: usize,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> std::result::Result<(u64, u64), RmaFault> {
        if !buffer.of_domain(&self.inner.domain) {
            return Err(RmaFault::ForeignBuffer);
        }
        if len > buffer.len() {
            return Err(RmaFault::BufferTooSmall);
        }
        self.check_rma(initiator, len, remote, offset, dest)
    }

    /// The error of an RMA post refused with `fault`.
    #[cold]
    #[inline(never)]
    fn rma_error(&self, fault: RmaFault, args: &RmaArgs<'_>, buffer_len: usize) -> Error {
        let call = args.call;
        match fault {
            RmaFault::ForeignBuffer => foreign_buffer(call),
            RmaFault::BufferTooSmall => Error::BufferTooSmall {
                what: "RMA length",
                needed: args.len,
                given: buffer_len,
            },
            RmaFault::Refused => self.rma_refused(call, args.initiator),
            RmaFault::NotReady(state) => not_ready(call, state, RMA_READY),
            RmaFault::Length => bad_rma_length(call, args.len, self.inner.rma.max_len),
            RmaFault::Remote(fault) => fault.error(args.remote),
            RmaFault::Peer => bad_address(call, args.dest),
            RmaFault::CqData(fault) => fault.error(call, args.data),
        }
    }

    /// The checks of an RMA post of `kind` with a buffer:
    /// [`check_rma_buffer`](Self::check_rma_buffer), and for
    /// `fi_writedata` that its data fits.
    #[inline(always)]
    fn check_rma_post(
        &self,
        kind: RmaPost,
        buffer: &Buffer,
        len: usize,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> std::result::Result<(u64, u64), RmaFault> {
        let checked = self.check_rma_buffer(kind.initiator(), buffer, len, remote, offset, dest)?;
        if let RmaPost::WriteData(data) = kind {
            self.cq_data_fits(data).map_err(RmaFault::CqData)?;
        }
        Ok(checked)
    }

    /// An RMA post of `kind` with a buffer: its checks inline, asking only
    /// whether it may be posted; why not is worked out by `rma_checked_again`,
    /// out of line. (With the fault told apart inline, its code was set
    /// before each check, and the post's result went through memory where
    /// the refusal joined: 20 instructions more per `fi_write` and its
    /// completion on `tcp;ofi_rxm`.)
    #[inline(always)]
    fn post_rma(
        &self,
        kind: RmaPost,
        buffer: Buffer,
        len: usize,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> Handback<Buffer> {
        match self
            .check_rma_post(kind, &buffer, len, remote, offset, dest)
            .ok()
        {
            Some((addr, peer)) => self.post_rma_checked(kind, buffer, len, remote, addr, peer),
            None => self.rma_checked_again(kind, buffer, len, remote, offset, dest),
        }
    }

    /// An RMA post whose checks failed, checked again to say which fails:
    /// refused with that fault, the buffer handed back; or, when none fails
    /// now (another thread enabled or connected the endpoint, or inserted
    /// the peer, meanwhile), posted.
    #[cold]
    #[inline(never)]
    fn rma_checked_again(
        &self,
        kind: RmaPost,
        buffer: Buffer,
        len: usize,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> Handback<Buffer> {
        match self.check_rma_post(kind, &buffer, len, remote, offset, dest) {
            Ok((addr, peer)) => self.post_rma_checked(kind, buffer, len, remote, addr, peer),
            Err(fault) => {
                let args = RmaArgs {
                    call: kind.call(),
                    initiator: kind.initiator(),
                    len,
                    remote,
                    dest,
                    data: match kind {
                        RmaPost::WriteData(data) => data,
                        RmaPost::Write | RmaPost::Read => 0,
                    },
                };
                let error = self.rma_error(fault, &args, buffer.len());
                Err((buffer, error))
            }
        }
    }

    /// The post of `kind` once its checks passed: `addr` is the remote
    /// address, `peer` the address to give the provider.
    #[inline(always)]
    fn post_rma_checked(
        &self,
        kind: RmaPost,
        buffer: Buffer,
        len: usize,
        remote: &RemoteRegion,
        addr: u64,
        peer: u64,
    ) -> Handback<Buffer> {
        match kind {
            // fi_rma(3): the local buffer (registered: desc) is read until
            // the completion; the remote range was checked against the
            // region.
            RmaPost::Write => post!(self, "fi_write", false, buffer, |p| sys::fi_write(
                self.raw(),
                p.addr,
                len,
                p.desc,
                peer,
                addr,
                remote.key,
                p.context
            )),
            // fi_rma(3): the provider writes at most len bytes into the
            // local buffer (registered: desc), which it owns until the
            // completion.
            RmaPost::Read => post!(self, "fi_read", false, buffer, |p| sys::fi_read(
                self.raw(),
                p.addr,
                len,
                p.desc,
                peer,
                addr,
                remote.key,
                p.context
            )),
            // fi_rma(3): as fi_write, with data within cq_data_size.
            RmaPost::WriteData(data) => {
                post!(self, "fi_writedata", false, buffer, |p| sys::fi_writedata(
                    self.raw(),
                    p.addr,
                    len,
                    p.desc,
                    data,
                    peer,
                    addr,
                    remote.key,
                    p.context
                ))
            }
        }
    }

    /// Why the endpoint may not post an RMA of role `initiator`: the
    /// capability, or else (once the endpoint is ready) the domain.
    #[cold]
    #[inline(never)]
    fn rma_refused(&self, call: &'static str, initiator: Caps) -> Error {
        if !self.inner.rma.capable.contains(initiator) {
            return Error::MissingCapability {
                call,
                needed: Caps::RMA | initiator,
            };
        }
        if let Err(e) = self.ready(call, RMA_READY) {
            return e;
        }
        Error::Unsupported {
            call,
            reason: "shm carries out this domain's RMA by writing or reading the peer \
                   process's memory directly, without the peer checking the key, access \
                   or bounds; ask for an RMA ordering (Hints::msg_order with FI_ORDER_RAW \
                   or another FI_ORDER_R*/W* bit) to have the peer check them",
        }
    }

    /// `fi_write`: writes the first `len` bytes of `buffer` into the peer's
    /// `remote` region at `offset`. The buffer moves into the provider and
    /// comes back with the write's completion, read from the queue bound
    /// for transmits ([`BufferPool::reclaim`](crate::BufferPool::reclaim)).
    /// `dest` is the peer's address on connectionless endpoints (ignored on
    /// connected ones).
    ///
    /// A write the target refuses (its region closed meanwhile, a wrong
    /// key) completes with an error on most providers; rxd drops it without
    /// an answer (`rxd_verify_iov`, `prov/rxd/src/rxd_cq.c` 551-567 in
    /// 1.22), so it never completes and its buffer comes back only with the
    /// endpoint's close: wait for RMA completions with a timeout.
    ///
    /// ```
    /// use libfabric::prelude::*;
    /// use libfabric::mr::{MemoryRegion, MrAccess};
    /// let hints = Hints::new().provider("tcp;ofi_rxm").node("127.0.0.1").caps(Caps::MSG | Caps::RMA);
    /// let (a, b) = (Rdm::open(&hints, 1)?, Rdm::open(&hints, 1)?);
    /// let to_b = a.insert(&b.name()?)?;
    /// // b registers memory that peers may write, and tells a where it is.
    /// let target = MemoryRegion::register(b.domain(), vec![0u8; 64], MrAccess::REMOTE_WRITE)?;
    /// let remote = target.remote(); // in a real program: sent as remote.to_bytes()
    /// // a writes 5 bytes at offset 8.
    /// let pool = a.buffer_pool(1, 64)?;
    /// let mut buf = pool.take().unwrap();
    /// buf[..5].copy_from_slice(b"hello");
    /// // rxm connects on first use: FI_EAGAIN until then, with the buffer
    /// // handed back; reading the queues makes progress.
    /// while let Err((back, e)) = a.endpoint().write(buf, 5, &remote, 8, to_b) {
    ///     assert!(e.is_again(), "{e}");
    ///     buf = back;
    ///     let _ = a.cq().read(&mut [Default::default()])?;
    ///     let _ = b.cq().read(&mut [Default::default()])?;
    /// }
    /// let done = loop {
    ///     // the write's completion: the buffer is back
    ///     match a.wait_one(&pool, Some(std::time::Duration::from_millis(1))) {
    ///         Err(libfabric::Error::TimedOut { .. }) => {}
    ///         done => break done?,
    ///     }
    ///     let _ = b.cq().read(&mut [Default::default()])?;
    /// };
    /// assert!(done.flags.contains(CompletionFlags::WRITE));
    /// // Progress b (rxm progresses the target's side as its queue is read).
    /// let mut seen = [0u8; 5];
    /// while { target.read_at(8, &mut seen)?; &seen != b"hello" } {
    ///     let _ = b.cq().read(&mut [Default::default()]);
    /// }
    /// # Ok::<(), libfabric::Error>(())
    /// ```
    ///
    /// # Errors
    /// Each with the buffer handed back: [`Error::MissingCapability`] for
    /// an endpoint without `FI_RMA` (or with RMA roles that leave out
    /// `FI_WRITE`); [`Error::State`] on an endpoint not enabled, with no
    /// transmit completion queue, not connected, or shut down;
    /// [`Error::Unsupported`] on a shm domain that would write the peer's
    /// memory unchecked (see [`Hints::msg_order`](crate::Hints::msg_order));
    /// [`Error::ForeignObject`] for a buffer of another domain;
    /// [`Error::BufferTooSmall`] for `len` over the buffer's length;
    /// [`Error::InvalidArgument`] for a `len` of 0, a remote address that
    /// overflows, or a `dest` not in the bound address vector;
    /// [`Error::TooLarge`] when `offset + len` is past the remote region or
    /// `len` over `max_msg_size`; [`Error::Call`] when `fi_write` fails
    /// (`FI_EAGAIN` when the queue is full: [`Error::is_again`]).
    #[doc(alias = "fi_write")]
    #[inline(always)]
    pub fn write(
        &self,
        buffer: Buffer,
        len: usize,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> Handback<Buffer> {
        self.post_rma(RmaPost::Write, buffer, len, remote, offset, dest)
    }

    /// `fi_read`: reads `len` bytes of the peer's `remote` region at
    /// `offset` into the start of `buffer`, which comes back with the
    /// read's completion (transmit queue) holding them.
    ///
    /// # Errors
    /// As [`write`](Self::write), with `FI_READ` as the role needed and
    /// `fi_read` as the call: the buffer comes back with the error.
    #[doc(alias = "fi_read")]
    #[inline(always)]
    pub fn read(
        &self,
        buffer: Buffer,
        len: usize,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> Handback<Buffer> {
        self.post_rma(RmaPost::Read, buffer, len, remote, offset, dest)
    }

    /// `fi_writedata`: [`write`](Self::write) that also delivers `data` as
    /// remote CQ data: the target reads a completion with
    /// `REMOTE_CQ_DATA` (and `RMA | REMOTE_WRITE`) from its receive queue,
    /// in a [`Data`](crate::cq::Data) or [`Tagged`](crate::cq::Tagged)
    /// format. Where the target's endpoint has mode `FI_RX_CQ_DATA`
    /// ([`Mode::RX_CQ_DATA`](crate::info::Mode::RX_CQ_DATA) in its
    /// `fi_info`), that completion consumes one receive posted there, whose
    /// buffer it hands back ([`BufferPool::reclaim`](crate::BufferPool::reclaim));
    /// otherwise it names no buffer. `data` must fit the domain's
    /// `cq_data_size`.
    ///
    /// # Errors
    /// As [`write`](Self::write), with `fi_writedata` as the call, and
    /// [`Error::State`] when the domain carries no CQ data or
    /// [`Error::TooLarge`] when `data` does not fit it: the buffer comes
    /// back with the error.
    #[doc(alias = "fi_writedata")]
    #[inline(always)]
    pub fn write_data(
        &self,
        buffer: Buffer,
        len: usize,
        data: u64,
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> Handback<Buffer> {
        self.post_rma(RmaPost::WriteData(data), buffer, len, remote, offset, dest)
    }

    /// `fi_inject_write`: writes `data` into the peer's `remote` region at
    /// `offset`, with no completion; the provider copies `data` before
    /// returning, so any slice will do. At most `inject_size` bytes
    /// ([`InfoEntry::inject_size`](crate::info::InfoEntry::inject_size)).
    ///
    /// # Errors
    /// [`Error::TooLarge`] over `inject_size`; the other checks of
    /// [`write`](Self::write), with `fi_inject_write` as the call;
    /// [`Error::Call`] when `fi_inject_write` fails.
    #[doc(alias = "fi_inject_write")]
    pub fn inject_write(
        &self,
        data: &[u8],
        remote: &RemoteRegion,
        offset: u64,
        dest: Addr,
    ) -> Result<()> {
        let call = "fi_inject_write";
        if data.len() > self.inner.inject_size {
            return Err(Error::TooLarge {
                what: "fi_inject_write length (inject_size)",
                limit: self.inner.inject_size,
                given: data.len(),
            });
        }
        let (addr, dest) = match self.check_rma(Caps::WRITE, data.len(), remote, offset, dest) {
            Ok(checked) => checked,
            Err(fault) => {
                let args = RmaArgs {
                    call,
                    initiator: Caps::WRITE,
                    len: data.len(),
                    remote,
                    dest,
                    data: 0,
                };
                return Err(self.rma_error(fault, &args, 0));
            }
        };
        // SAFETY: fi_rma(3): fi_inject_write's buffer may be reused as soon
        // as the call returns; no context, no completion, no descriptor
        // needed. The endpoint is enabled with a transmit CQ and FI_RMA,
        // data is within inject_size, the remote range within the region
        // and dest a live address (checked above).
        let ret = unsafe {
            sys::fi_inject_write(
                self.raw(),
                data.as_ptr().cast(),
                data.len(),
                dest,
                addr,
                remote.key,
            )
        };
        check(call, ret)
    }
}
