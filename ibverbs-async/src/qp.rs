//! Reliable-connected queue pairs: `ibv_create_qp(3)`, `ibv_modify_qp(3)`,
//! `ibv_post_send(3)`, `ibv_post_recv(3)`, `ibv_destroy_qp(3)`.

use std::fmt;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::{Arc, RwLock};

use libibverbs_sys as sys;

use crate::attr::{Gid, Mtu};
use crate::cq::{Cq, CqInner};
use crate::error::{check_ptr, check_rc, Error, ObjectKind, Result};
use crate::mr::{AccessFlags, HeldMrs, Mr, RemoteAddr};
use crate::pd::{Pd, PdInner};
use crate::registry::{handle, Describe, Destroy, ObjectId, Registered};
use crate::srq::{Srq, SrqInner};

pub(crate) struct QpInner {
    raw: NonNull<sys::ibv_qp>,
    id: ObjectId,
    qp_num: u32,
    cap: QpCap,
    dead: bool,
    /// The state this crate last moved the QP to. Posts hold it shared and
    /// modifies exclusively, so a post never overlaps a state change.
    /// Transitions the device makes on its own (to SQE or ERR) only go
    /// further along, where posting is allowed too.
    state: RwLock<QpState>,
    /// Memory regions work was posted on: the device may use them until the
    /// QP is destroyed.
    mrs: HeldMrs,
    // The objects the QP uses: `ibv_destroy_cq`/`ibv_destroy_srq` fail with
    // EBUSY while a QP uses them, so the QP keeps them until it is gone
    // (fields drop after `Drop::drop` destroyed the QP).
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    srq: Option<Arc<SrqInner>>,
    pub(crate) pd: Arc<PdInner>,
}

// SAFETY: verbs objects are safe for multi-threaded access (ibv_alloc_td(3));
// several threads may post to one QP (the provider locks each queue) and
// modify it; the Rust-side state is immutable or behind a Mutex.
unsafe impl Send for QpInner {}
// SAFETY: as for Send.
unsafe impl Sync for QpInner {}

impl Registered for QpInner {
    fn id(&self) -> ObjectId {
        self.id
    }
}

impl QpInner {
    pub(crate) fn raw(&self) -> *mut sys::ibv_qp {
        self.raw.as_ptr()
    }

    fn destroy_raw(&mut self) -> Result<()> {
        // SAFETY: nothing else holds the QP (this is its Drop or the last
        // handle's destroy). Asynchronous events for it hold an Arc, except
        // those read while the last reference was going, which their reader
        // acknowledges at once (registry.rs), so ibv_destroy_qp's wait for
        // acknowledgements ends.
        check_rc("ibv_destroy_qp", unsafe { sys::ibv_destroy_qp(self.raw()) })?;
        self.dead = true;
        self.pd.ctx.qps.remove(self.raw.as_ptr() as usize, self.id);
        Ok(())
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        if !self.dead && self.destroy_raw().is_err() {
            // Still alive: the device may use its regions, and the QP its
            // CQs, SRQ and PD: keep them all for ever rather than destroy
            // them under it.
            self.mrs.leak();
            std::mem::forget(Arc::clone(&self.send_cq));
            std::mem::forget(Arc::clone(&self.recv_cq));
            if let Some(srq) = &self.srq {
                std::mem::forget(Arc::clone(srq));
            }
            std::mem::forget(Arc::clone(&self.pd));
        }
    }
}

impl Destroy for QpInner {
    const KIND: ObjectKind = ObjectKind::QueuePair;

    fn destroy_now(&mut self) -> Result<()> {
        self.destroy_raw()
    }

    fn handed_back(arc: &Arc<Self>) {
        arc.pd.ctx.qps.reinsert(arc.raw.as_ptr() as usize, arc);
    }
}

/// Queue sizes of a QP (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QpCap {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests (ignored with an SRQ).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send.
    pub max_send_sge: u32,
    /// Scatter entries per receive (ignored with an SRQ).
    pub max_recv_sge: u32,
    /// Bytes of inline data per send.
    pub max_inline_data: u32,
}

impl QpCap {
    /// `max_send_wr` sends and `max_recv_wr` receives of one scatter/gather
    /// entry each, no inline data; change the other fields after.
    #[must_use]
    pub fn new(max_send_wr: u32, max_recv_wr: u32) -> QpCap {
        QpCap {
            max_send_wr,
            max_recv_wr,
            ..QpCap::default()
        }
    }
}

impl Default for QpCap {
    /// 16 sends and 16 receives of one entry each, no inline data.
    fn default() -> QpCap {
        QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// How to create a reliable-connected QP (`struct ibv_qp_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct QpInit<'a> {
    send_cq: &'a Cq,
    recv_cq: &'a Cq,
    srq: Option<&'a Srq>,
    cap: QpCap,
    sq_sig_all: bool,
}

impl<'a> QpInit<'a> {
    /// An RC QP with the given send and receive CQs (which may be the same).
    #[must_use]
    pub fn rc(send_cq: &'a Cq, recv_cq: &'a Cq) -> QpInit<'a> {
        QpInit {
            send_cq,
            recv_cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }

    /// Receive from `srq` instead of the QP's own receive queue.
    #[must_use]
    pub fn srq(mut self, srq: &'a Srq) -> Self {
        self.srq = Some(srq);
        self
    }

    /// Queue sizes.
    #[must_use]
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }

    /// Whether every send produces a completion, whatever its
    /// [`SendRequest::signaled`] flag.
    #[must_use]
    pub fn sq_sig_all(mut self, all: bool) -> Self {
        self.sq_sig_all = all;
        self
    }
}

/// QP state (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// Reset.
    Reset,
    /// Initialized.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error.
    Err,
    /// Unknown or another value.
    Unknown(u32),
}

impl QpState {
    /// Decodes `enum ibv_qp_state`.
    #[must_use]
    pub fn from_raw(raw: u32) -> QpState {
        match raw {
            sys::IBV_QPS_RESET => QpState::Reset,
            sys::IBV_QPS_INIT => QpState::Init,
            sys::IBV_QPS_RTR => QpState::Rtr,
            sys::IBV_QPS_RTS => QpState::Rts,
            sys::IBV_QPS_SQD => QpState::Sqd,
            sys::IBV_QPS_SQE => QpState::Sqe,
            sys::IBV_QPS_ERR => QpState::Err,
            other => QpState::Unknown(other),
        }
    }
}

/// What a peer needs to connect to a QP, exchanged out of band (see
/// [`Qp::endpoint`]; [`Endpoint::new`] rebuilds one from the exchanged
/// fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Endpoint {
    /// QP number (24 bits).
    pub qp_num: u32,
    /// First packet sequence number the QP sends with (24 bits).
    pub psn: u32,
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// The GID of the QP's port to address it with.
    pub gid: Gid,
}

impl Endpoint {
    /// An endpoint from the fields a peer sent.
    #[must_use]
    pub fn new(qp_num: u32, psn: u32, lid: u16, gid: Gid) -> Endpoint {
        Endpoint {
            qp_num,
            psn,
            lid,
            gid,
        }
    }

    /// Checks the fields the peer sent against the widths the InfiniBand
    /// specification gives them: QP numbers and PSNs have 24 bits, and
    /// rxe masks wider values (`sw/rxe/rxe_hdr.h` 188, 418) instead of
    /// refusing them, so a QP would connect to another QP number than the
    /// one given.
    pub(crate) fn check(&self) -> Result<()> {
        if self.qp_num > MAX_QPN {
            return Err(Error::invalid(
                "the remote QP number has 24 bits (at most 0xffffff)",
            ));
        }
        if self.psn > MAX_PSN {
            return Err(Error::invalid(
                "the remote PSN has 24 bits (at most 0xffffff)",
            ));
        }
        Ok(())
    }
}

/// Local choices for connecting a QP (INIT -> RTR -> RTS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// Local port number.
    pub port: u8,
    /// Index of the local GID to send from (see [`Context::ipv4_gid`](crate::Context::ipv4_gid)).
    pub gid_index: u32,
    /// Path MTU.
    pub mtu: Mtu,
    /// First packet sequence number to send with (24 bits).
    pub psn: u32,
    /// What the peer may do to this QP's memory.
    pub access: AccessFlags,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout; 0 = infinite).
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// Receiver-not-ready retries (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code (0..=31).
    pub min_rnr_timer: u8,
    /// Outstanding RDMA reads/atomics this QP initiates.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics this QP answers.
    pub max_dest_rd_atomic: u8,
    /// Hop limit of the global route header.
    pub hop_limit: u8,
}

impl ConnectOptions {
    /// Options for `port` and local GID `gid_index`: MTU 1024, remote read
    /// and write allowed, retries and timeouts as in `ibv_rc_pingpong`.
    #[must_use]
    pub fn new(port: u8, gid_index: u32) -> ConnectOptions {
        ConnectOptions {
            port,
            gid_index,
            mtu: Mtu::Mtu1024,
            psn: 0,
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            hop_limit: 64,
        }
    }

    /// The same options with another first PSN (its low 24 bits).
    #[must_use]
    pub fn psn(mut self, psn: u32) -> Self {
        self.psn = psn & MAX_PSN;
        self
    }

    /// Checks every field against the width the InfiniBand specification
    /// gives it: libibverbs passes the bytes on as they are, and a driver
    /// may truncate them, or read them whole (rxe keeps a retry count of
    /// 200 as 200 retries).
    pub(crate) fn check(&self) -> Result<()> {
        let limits = [
            (
                self.psn <= MAX_PSN,
                "the PSN has 24 bits (at most 0xffffff)",
            ),
            (
                self.timeout <= 31,
                "the ACK timeout is an exponent of 0..=31",
            ),
            (self.retry_cnt <= 7, "the retry count has 3 bits (0..=7)"),
            (
                self.rnr_retry <= 7,
                "the RNR retry count has 3 bits (0..=7)",
            ),
            (
                self.min_rnr_timer <= 31,
                "the RNR NAK timer code has 5 bits (0..=31)",
            ),
        ];
        match limits.iter().find(|(ok, _)| !ok) {
            Some((_, what)) => Err(Error::invalid(what)),
            None => check_qp_access(self.access),
        }
    }
}

/// The largest packet sequence number: PSNs have 24 bits.
const MAX_PSN: u32 = 0x00ff_ffff;

/// The largest QP number: the packet header's destination QP has 24 bits.
const MAX_QPN: u32 = 0x00ff_ffff;

/// Access rights of a QP: flags this crate names only.
fn check_qp_access(access: AccessFlags) -> Result<()> {
    if AccessFlags::from_bits(access.bits()).is_none() {
        return Err(Error::invalid(
            "access flags this crate does not name (AccessFlags::from_bits_retain)",
        ));
    }
    Ok(())
}

/// The operation of a [`SendRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendOp {
    Send,
    SendWithImm(u32),
    RdmaWrite(RemoteAddr),
    RdmaWriteWithImm(RemoteAddr, u32),
    RdmaRead(RemoteAddr),
}

/// A send-queue work request on a range of a local memory region.
#[derive(Clone, Debug)]
pub struct SendRequest<'a> {
    mr: &'a Mr,
    range: Range<usize>,
    op: SendOp,
    wr_id: u64,
    signaled: bool,
    solicited: bool,
}

impl<'a> SendRequest<'a> {
    fn new(mr: &'a Mr, range: Range<usize>, op: SendOp) -> Self {
        SendRequest {
            mr,
            range,
            op,
            wr_id: 0,
            signaled: true,
            solicited: false,
        }
    }

    /// Send `range` of `mr` to the peer's next receive (`IBV_WR_SEND`).
    #[must_use]
    pub fn send(mr: &'a Mr, range: Range<usize>) -> Self {
        Self::new(mr, range, SendOp::Send)
    }

    /// Send with 32 bits of immediate data (`IBV_WR_SEND_WITH_IMM`).
    #[must_use]
    pub fn send_with_imm(mr: &'a Mr, range: Range<usize>, imm: u32) -> Self {
        Self::new(mr, range, SendOp::SendWithImm(imm))
    }

    /// Write `range` of `mr` into the peer's memory (`IBV_WR_RDMA_WRITE`).
    #[must_use]
    pub fn rdma_write(mr: &'a Mr, range: Range<usize>, remote: RemoteAddr) -> Self {
        Self::new(mr, range, SendOp::RdmaWrite(remote))
    }

    /// RDMA write that also consumes a receive at the peer, with immediate
    /// data (`IBV_WR_RDMA_WRITE_WITH_IMM`).
    #[must_use]
    pub fn rdma_write_with_imm(
        mr: &'a Mr,
        range: Range<usize>,
        remote: RemoteAddr,
        imm: u32,
    ) -> Self {
        Self::new(mr, range, SendOp::RdmaWriteWithImm(remote, imm))
    }

    /// Read the peer's memory into `range` of `mr` (`IBV_WR_RDMA_READ`;
    /// `mr` needs [`AccessFlags::LOCAL_WRITE`]).
    #[must_use]
    pub fn rdma_read(mr: &'a Mr, range: Range<usize>, remote: RemoteAddr) -> Self {
        Self::new(mr, range, SendOp::RdmaRead(remote))
    }

    /// The ID the completion will carry.
    #[must_use]
    pub fn wr_id(mut self, wr_id: u64) -> Self {
        self.wr_id = wr_id;
        self
    }

    /// Whether the request produces a completion (default: yes).
    #[must_use]
    pub fn signaled(mut self, signaled: bool) -> Self {
        self.signaled = signaled;
        self
    }

    /// Whether the peer's receive completion is solicited (wakes a CQ armed
    /// for solicited completions only).
    #[must_use]
    pub fn solicited(mut self, solicited: bool) -> Self {
        self.solicited = solicited;
        self
    }
}

/// A receive work request on a range of a local memory region, for
/// [`Qp::post_recv`] and [`Srq::post_recv`]: built like a [`SendRequest`].
///
/// ```no_run
/// # fn main() -> ibverbs_async::Result<()> {
/// # let ctx = ibverbs_async::Context::open("rxe0")?;
/// # let pd = ctx.alloc_pd()?;
/// # let srq = pd.create_srq(16, 1)?;
/// use ibverbs_async::{AccessFlags, RecvRequest};
/// let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
/// srq.post_recv(&RecvRequest::new(&mr, 0..4096).wr_id(7))?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RecvRequest<'a> {
    pub(crate) mr: &'a Mr,
    pub(crate) range: Range<usize>,
    pub(crate) wr_id: u64,
}

impl<'a> RecvRequest<'a> {
    /// Receive into `range` of `mr` (which needs
    /// [`AccessFlags::LOCAL_WRITE`]); work request ID 0.
    #[must_use]
    pub fn new(mr: &'a Mr, range: Range<usize>) -> Self {
        RecvRequest {
            mr,
            range,
            wr_id: 0,
        }
    }

    /// The ID the completion will carry.
    #[must_use]
    pub fn wr_id(mut self, wr_id: u64) -> Self {
        self.wr_id = wr_id;
        self
    }

    /// Posts the request with `post`, holding its region in `held`: the one
    /// body of `ibv_post_recv` and `ibv_post_srq_recv`.
    pub(crate) fn post(
        &self,
        held: &HeldMrs,
        call: &'static str,
        post: impl FnOnce(*mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> libc::c_int,
    ) -> Result<()> {
        let mut sge = self.mr.inner.sge(&self.range)?;
        held.hold(&self.mr.inner);
        let mut wr = sys::ibv_recv_wr {
            wr_id: self.wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad: *mut sys::ibv_recv_wr = std::ptr::null_mut();
        check_rc(call, post(&mut wr, &mut bad))
    }
}

/// A reliable-connected queue pair: `ibv_create_qp()` with `IBV_QPT_RC`.
///
/// A cheap handle (an `Arc`); clones and events naming the QP keep it
/// alive. It holds its CQs, its SRQ and the memory regions it was given work
/// on until it is destroyed.
// Send + Sync through Arc<QpInner>: see the `unsafe impl`s on QpInner
// for why the C object may be used and dropped from any thread.
#[derive(Clone)]
pub struct Qp {
    pub(crate) inner: Arc<QpInner>,
}

impl Pd {
    /// Creates a reliable-connected QP (`ibv_create_qp()`), in the RESET
    /// state.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the CQs or SRQ belong to another
    /// context or protection domain; [`Error::Call`] if creation fails.
    #[doc(alias = "ibv_create_qp")]
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        let pd = &self.inner;
        for cq in [init.send_cq, init.recv_cq] {
            if !Arc::ptr_eq(&cq.inner.ctx, &pd.ctx) {
                return Err(Error::invalid("the CQ belongs to another context"));
            }
        }
        if let Some(srq) = init.srq {
            if !Arc::ptr_eq(&srq.inner.pd, pd) {
                return Err(Error::invalid(
                    "the SRQ belongs to another protection domain",
                ));
            }
        }
        let send_cq = Arc::clone(&init.send_cq.inner);
        let recv_cq = Arc::clone(&init.recv_cq.inner);
        let srq = init.srq.map(|s| Arc::clone(&s.inner));
        let inner = pd.ctx.qps.create(move || {
            let mut attr = sys::ibv_qp_init_attr {
                qp_context: std::ptr::null_mut(),
                send_cq: send_cq.raw(),
                recv_cq: recv_cq.raw(),
                srq: srq.as_ref().map_or(std::ptr::null_mut(), |s| s.raw()),
                cap: sys::ibv_qp_cap {
                    max_send_wr: init.cap.max_send_wr,
                    max_recv_wr: init.cap.max_recv_wr,
                    max_send_sge: init.cap.max_send_sge,
                    max_recv_sge: init.cap.max_recv_sge,
                    max_inline_data: init.cap.max_inline_data,
                },
                qp_type: sys::IBV_QPT_RC,
                sq_sig_all: init.sq_sig_all.into(),
            };
            // SAFETY: valid PD, CQs and SRQ of the same context (checked);
            // ibv_create_qp(3) returns NULL with errno set on failure and
            // writes the actual capacities into attr.cap.
            let raw = check_ptr("ibv_create_qp", unsafe {
                sys::ibv_create_qp(pd.raw(), &mut attr)
            })?;
            // SAFETY: qp_num is set by ibv_create_qp.
            let qp_num = unsafe { (*raw.as_ptr()).qp_num };
            let inner = Arc::new(QpInner {
                raw,
                id: ObjectId::next(),
                qp_num,
                cap: QpCap {
                    max_send_wr: attr.cap.max_send_wr,
                    max_recv_wr: attr.cap.max_recv_wr,
                    max_send_sge: attr.cap.max_send_sge,
                    max_recv_sge: attr.cap.max_recv_sge,
                    max_inline_data: attr.cap.max_inline_data,
                },
                dead: false,
                state: RwLock::new(QpState::Reset),
                mrs: HeldMrs::new(),
                send_cq,
                recv_cq,
                srq,
                pd: Arc::clone(pd),
            });
            Ok((raw.as_ptr() as usize, inner))
        })?;
        Ok(Qp { inner })
    }
}

impl Qp {
    /// The QP number peers address.
    #[must_use]
    pub fn qp_num(&self) -> u32 {
        self.inner.qp_num
    }

    /// The queue sizes the device granted.
    #[must_use]
    pub fn cap(&self) -> QpCap {
        self.inner.cap
    }

    /// The send CQ.
    #[must_use]
    pub fn send_cq(&self) -> Cq {
        Cq {
            inner: Arc::clone(&self.inner.send_cq),
        }
    }

    /// The receive CQ.
    #[must_use]
    pub fn recv_cq(&self) -> Cq {
        Cq {
            inner: Arc::clone(&self.inner.recv_cq),
        }
    }

    /// The SRQ the QP receives from, if any.
    #[must_use]
    pub fn srq(&self) -> Option<Srq> {
        self.inner.srq.as_ref().map(|s| Srq {
            inner: Arc::clone(s),
        })
    }

    /// Moves the QP to `attr.qp_state` (`mask` includes `IBV_QP_STATE`)
    /// and records the state, with no post running meanwhile.
    fn modify(&self, attr: &mut sys::ibv_qp_attr, mask: u32) -> Result<()> {
        let mut state = self.inner.state.write().unwrap_or_else(|e| e.into_inner());
        // SAFETY: valid QP; ibv_modify_qp(3) reads the attributes selected
        // by `mask` and returns 0 or an errno value.
        let rc = unsafe { sys::ibv_modify_qp(self.inner.raw(), attr, mask as libc::c_int) };
        check_rc("ibv_modify_qp", rc)?;
        *state = QpState::from_raw(attr.qp_state);
        Ok(())
    }

    fn zeroed_attr() -> sys::ibv_qp_attr {
        // SAFETY: ibv_qp_attr is plain data; all-zero is a valid value.
        unsafe { std::mem::zeroed() }
    }

    /// RESET -> INIT on `port`, allowing `access` to peers.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for access flags this crate does not
    /// name; [`Error::Call`] when the device refuses (a port it does not
    /// have, a QP not in RESET).
    pub fn modify_to_init(&self, port: u8, access: AccessFlags) -> Result<()> {
        check_qp_access(access)?;
        let mut attr = Self::zeroed_attr();
        attr.qp_state = sys::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = port;
        attr.qp_access_flags = access.bits();
        self.modify(
            &mut attr,
            sys::IBV_QP_STATE
                | sys::IBV_QP_PKEY_INDEX
                | sys::IBV_QP_PORT
                | sys::IBV_QP_ACCESS_FLAGS,
        )
    }

    /// INIT -> RTR towards `remote`, with a global route from local GID
    /// `opts.gid_index` (RoCE needs one).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a field of `opts`, `remote.qp_num` or
    /// `remote.psn` outside the width the InfiniBand specification gives
    /// it (24 bits for QP numbers and PSNs);
    /// [`Error::TooLarge`] for a GID index above 255; [`Error::Call`] when
    /// the device refuses.
    pub fn modify_to_rtr(&self, opts: &ConnectOptions, remote: &Endpoint) -> Result<()> {
        opts.check()?;
        remote.check()?;
        let sgid_index = u8::try_from(opts.gid_index).map_err(|_| Error::TooLarge {
            what: "GID index in a path",
            limit: u8::MAX.into(),
            given: opts.gid_index as usize,
        })?;
        let mut attr = Self::zeroed_attr();
        attr.qp_state = sys::IBV_QPS_RTR;
        attr.path_mtu = opts.mtu.to_raw();
        attr.dest_qp_num = remote.qp_num;
        attr.rq_psn = remote.psn;
        attr.max_dest_rd_atomic = opts.max_dest_rd_atomic;
        attr.min_rnr_timer = opts.min_rnr_timer;
        attr.ah_attr.is_global = 1;
        attr.ah_attr.dlid = remote.lid;
        attr.ah_attr.sl = 0;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = opts.port;
        attr.ah_attr.grh.dgid = remote.gid.to_raw();
        attr.ah_attr.grh.sgid_index = sgid_index;
        attr.ah_attr.grh.hop_limit = opts.hop_limit;
        attr.ah_attr.grh.flow_label = 0;
        attr.ah_attr.grh.traffic_class = 0;
        self.modify(
            &mut attr,
            sys::IBV_QP_STATE
                | sys::IBV_QP_AV
                | sys::IBV_QP_PATH_MTU
                | sys::IBV_QP_DEST_QPN
                | sys::IBV_QP_RQ_PSN
                | sys::IBV_QP_MAX_DEST_RD_ATOMIC
                | sys::IBV_QP_MIN_RNR_TIMER,
        )
    }

    /// RTR -> RTS.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a field of `opts` outside the width
    /// the InfiniBand specification gives it; [`Error::Call`] when the
    /// device refuses.
    pub fn modify_to_rts(&self, opts: &ConnectOptions) -> Result<()> {
        opts.check()?;
        let mut attr = Self::zeroed_attr();
        attr.qp_state = sys::IBV_QPS_RTS;
        attr.timeout = opts.timeout;
        attr.retry_cnt = opts.retry_cnt;
        attr.rnr_retry = opts.rnr_retry;
        attr.sq_psn = opts.psn;
        attr.max_rd_atomic = opts.max_rd_atomic;
        self.modify(
            &mut attr,
            sys::IBV_QP_STATE
                | sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC,
        )
    }

    /// RTS -> SQD: stop the send queue after the outstanding requests;
    /// with `notify`, ask for the `IBV_EVENT_SQ_DRAINED` event once drained.
    ///
    /// # Errors
    /// [`Error::Call`](crate::Error::Call) when the device refuses (a QP not in RTS).
    pub fn modify_to_sqd(&self, notify: bool) -> Result<()> {
        let mut attr = Self::zeroed_attr();
        attr.qp_state = sys::IBV_QPS_SQD;
        attr.en_sqd_async_notify = notify.into();
        self.modify(
            &mut attr,
            sys::IBV_QP_STATE | sys::IBV_QP_EN_SQD_ASYNC_NOTIFY,
        )
    }

    /// Any state -> ERR: outstanding work is flushed with
    /// `IBV_WC_WR_FLUSH_ERR`.
    ///
    /// # Errors
    /// [`Error::Call`](crate::Error::Call) when the device refuses.
    pub fn modify_to_error(&self) -> Result<()> {
        let mut attr = Self::zeroed_attr();
        attr.qp_state = sys::IBV_QPS_ERR;
        self.modify(&mut attr, sys::IBV_QP_STATE)
    }

    /// Any state -> RESET.
    ///
    /// # Errors
    /// [`Error::Call`](crate::Error::Call) when the device refuses.
    pub fn modify_to_reset(&self) -> Result<()> {
        let mut attr = Self::zeroed_attr();
        attr.qp_state = sys::IBV_QPS_RESET;
        self.modify(&mut attr, sys::IBV_QP_STATE)
    }

    /// The current state (`ibv_query_qp()`).
    ///
    /// # Errors
    /// [`Error::Call`](crate::Error::Call) when `ibv_query_qp` fails.
    #[doc(alias = "ibv_query_qp")]
    pub fn state(&self) -> Result<QpState> {
        let mut attr = Self::zeroed_attr();
        // SAFETY: ibv_qp_init_attr is plain data (pointers may be null).
        let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: valid QP; fills the caller's structs.
        let rc = unsafe {
            sys::ibv_query_qp(
                self.inner.raw(),
                &mut attr,
                sys::IBV_QP_STATE as libc::c_int,
                &mut init,
            )
        };
        check_rc("ibv_query_qp", rc)?;
        Ok(QpState::from_raw(attr.qp_state))
    }

    /// What a peer needs to connect to this QP with `opts`: QP number, first
    /// PSN, port LID and the GID at `opts.gid_index`.
    ///
    /// # Errors
    /// As [`Context::query_port`](crate::Context::query_port) and
    /// [`Context::query_gid`](crate::Context::query_gid).
    pub fn endpoint(&self, opts: &ConnectOptions) -> Result<Endpoint> {
        let ctx = crate::Context {
            inner: Arc::clone(&self.inner.pd.ctx),
        };
        let port = ctx.query_port(opts.port)?;
        let gid = ctx.query_gid(opts.port, opts.gid_index)?;
        Ok(Endpoint {
            qp_num: self.inner.qp_num,
            psn: opts.psn,
            lid: port.lid(),
            gid,
        })
    }

    /// Moves the QP RESET -> INIT -> RTR -> RTS, connected to `remote`.
    ///
    /// # Errors
    /// As [`modify_to_init`](Qp::modify_to_init),
    /// [`modify_to_rtr`](Qp::modify_to_rtr) and [`modify_to_rts`](Qp::modify_to_rts);
    /// a bad field of `opts` or `remote` is found before the first
    /// transition.
    pub fn connect(&self, opts: &ConnectOptions, remote: &Endpoint) -> Result<()> {
        // Checked before the first transition, so that a bad field does not
        // leave the QP half way.
        opts.check()?;
        remote.check()?;
        self.modify_to_init(opts.port, opts.access)?;
        self.modify_to_rtr(opts, remote)?;
        self.modify_to_rts(opts)
    }

    /// Connects two QPs of this process to each other (on one device or on
    /// two), each with its own options.
    ///
    /// # Errors
    /// As [`endpoint`](Qp::endpoint) and [`connect`](Qp::connect).
    pub fn connect_pair(
        a: &Qp,
        a_opts: &ConnectOptions,
        b: &Qp,
        b_opts: &ConnectOptions,
    ) -> Result<()> {
        let ea = a.endpoint(a_opts)?;
        let eb = b.endpoint(b_opts)?;
        a.connect(a_opts, &eb)?;
        b.connect(b_opts, &ea)
    }

    fn check_mr(&self, mr: &Mr) -> Result<()> {
        if !Arc::ptr_eq(&mr.inner.pd, &self.inner.pd) {
            return Err(Error::invalid(
                "the memory region belongs to another protection domain",
            ));
        }
        Ok(())
    }

    /// Posts a receive (`ibv_post_recv()`). The QP keeps the request's
    /// memory region registered until it is destroyed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a QP attached to an SRQ (post to the
    /// SRQ instead) or an MR of another protection domain;
    /// [`Error::State`] for a QP still in RESET (move it to INIT first:
    /// [`modify_to_init`](Qp::modify_to_init) or [`connect`](Qp::connect));
    /// [`Error::OutOfBounds`] if the range does not fit (or ends before it
    /// starts); [`Error::TooLarge`] for a range over 4 GiB;
    /// [`Error::Call`] when posting fails (e.g. the receive queue is full).
    #[doc(alias = "ibv_post_recv")]
    pub fn post_recv(&self, req: &RecvRequest<'_>) -> Result<()> {
        if self.inner.srq.is_some() {
            return Err(Error::invalid(
                "the QP receives from an SRQ: post receives to the SRQ",
            ));
        }
        self.check_mr(req.mr)?;
        req.mr.inner.sge(&req.range)?;
        // Held across the call: no state change overlaps the post.
        let state = self.inner.state.read().unwrap_or_else(|e| e.into_inner());
        if *state == QpState::Reset {
            // A receive posted in RESET is an error (IBTA C10-97.2.1); siw
            // queues it anyway.
            return Err(Error::State {
                call: "ibv_post_recv",
                reason: "the QP is in RESET: receives need it in INIT or later",
            });
        }
        req.post(&self.inner.mrs, "ibv_post_recv", |wr, bad| {
            // SAFETY: valid QP; the request and its scatter list live for
            // the call (the provider copies them); the memory is held
            // registered by this QP until it is destroyed.
            unsafe { sys::ibv_post_recv(self.inner.raw(), wr, bad) }
        })
    }

    /// Posts a send-queue work request (`ibv_post_send()`). The QP keeps the
    /// request's memory region registered until it is destroyed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an MR of another protection domain;
    /// [`Error::State`] for a QP this crate has not moved to RTS (connect
    /// it first: a send posted before then is refused by rxe and siw only
    /// after they queued it, and it would go out once the QP is
    /// connected); [`Error::OutOfBounds`] if the range does not fit (or
    /// ends before it starts); [`Error::TooLarge`] for a range over 4 GiB;
    /// [`Error::Call`] when posting fails (e.g. the send queue is full).
    #[doc(alias = "ibv_post_send")]
    pub fn post_send(&self, req: &SendRequest<'_>) -> Result<()> {
        self.check_mr(req.mr)?;
        let mut sge = req.mr.inner.sge(&req.range)?;
        // Held across the call: no state change overlaps the post.
        let state = self.inner.state.read().unwrap_or_else(|e| e.into_inner());
        // RTS, or where the crate moved it from RTS (SQD queues sends until
        // RTS again, ERR flushes them).
        if !matches!(*state, QpState::Rts | QpState::Sqd | QpState::Err) {
            return Err(Error::State {
                call: "ibv_post_send",
                reason: "the QP is not connected: sends need it in RTS",
            });
        }
        self.inner.mrs.hold(&req.mr.inner);
        // SAFETY: ibv_send_wr is plain data (pointers and integers in unions);
        // all-zero is a valid value.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = req.wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut flags = 0;
        if req.signaled {
            flags |= sys::IBV_SEND_SIGNALED;
        }
        if req.solicited {
            flags |= sys::IBV_SEND_SOLICITED;
        }
        wr.send_flags = flags;
        let rdma = |r: RemoteAddr| sys::ibv_send_wr__bindgen_ty_2 {
            rdma: sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
                remote_addr: r.addr,
                rkey: r.rkey,
            },
        };
        match req.op {
            SendOp::Send => wr.opcode = sys::IBV_WR_SEND,
            SendOp::SendWithImm(imm) => {
                wr.opcode = sys::IBV_WR_SEND_WITH_IMM;
                wr.__bindgen_anon_1.imm_data = imm.to_be();
            }
            SendOp::RdmaWrite(r) => {
                wr.opcode = sys::IBV_WR_RDMA_WRITE;
                wr.wr = rdma(r);
            }
            SendOp::RdmaWriteWithImm(r, imm) => {
                wr.opcode = sys::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.wr = rdma(r);
                wr.__bindgen_anon_1.imm_data = imm.to_be();
            }
            SendOp::RdmaRead(r) => {
                wr.opcode = sys::IBV_WR_RDMA_READ;
                wr.wr = rdma(r);
            }
        }
        let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: valid QP; the request and its scatter list live for the
        // call (not inline: the provider copies the descriptors and the
        // device reads the memory later, which this QP holds registered
        // until destroyed); remote addresses are checked by the peer's
        // device against its keys.
        let rc = unsafe { sys::ibv_post_send(self.inner.raw(), &mut wr, &mut bad) };
        check_rc("ibv_post_send", rc)
    }
}

handle! {
    Qp(QpInner), what = "QP",
    /// Destroys the QP now (`ibv_destroy_qp()`).
    fn destroy = "ibv_destroy_qp"
}

impl Describe for QpInner {
    fn describe(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("qp_num", &self.qp_num)
            .field("srq", &self.srq.is_some());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_options_are_checked_against_their_widths() {
        let ok = ConnectOptions::new(1, 3);
        ok.check().unwrap();
        let edges = ConnectOptions {
            psn: MAX_PSN,
            timeout: 31,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 31,
            ..ok
        };
        edges.check().unwrap();
        assert_eq!(ok.psn(u32::MAX).psn, MAX_PSN);
        let bad = [
            ConnectOptions {
                psn: MAX_PSN + 1,
                ..ok
            },
            ConnectOptions { timeout: 32, ..ok },
            ConnectOptions { timeout: 255, ..ok },
            ConnectOptions { retry_cnt: 8, ..ok },
            ConnectOptions { rnr_retry: 8, ..ok },
            ConnectOptions {
                min_rnr_timer: 32,
                ..ok
            },
            ConnectOptions {
                access: AccessFlags::from_bits_retain(1 << 31),
                ..ok
            },
        ];
        for opts in bad {
            assert!(
                matches!(opts.check(), Err(Error::InvalidArgument(_))),
                "{opts:?}"
            );
        }
    }

    #[test]
    fn endpoint_fields_are_checked_against_their_widths() {
        let gid = Gid::default();
        Endpoint::new(0, 0, 0, gid).check().unwrap();
        Endpoint::new(MAX_QPN, MAX_PSN, u16::MAX, gid)
            .check()
            .unwrap();
        // A peer's QP number with bits above the 24 of the packet header:
        // rxe would mask it and connect to QP 0x000011.
        for bad in [
            Endpoint::new(0x0100_0011, 0, 0, gid),
            Endpoint::new(u32::MAX, 0, 0, gid),
            Endpoint::new(1, MAX_PSN + 1, 0, gid),
        ] {
            assert!(
                matches!(bad.check(), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }
}
