//! The RMA ping-pong (`-o write|read|writedata`), after fabtests'
//! `rma_pingpong`.
//!
//! Each side registers one region of the largest size, with only the
//! access its op needs (write, writedata: `REMOTE_WRITE` on both sides;
//! read: `REMOTE_READ` on the server, no region on the client), and the two
//! exchange them over the control connection (`Kind::Region`). The local
//! side of every RMA is the pool buffer the send/recv mode sends from.
//!
//! - write: the client writes its message into the server's region; the
//!   server notices it by polling the region's last byte until it holds the
//!   iteration's sequence number (the byte is set to 0xff before each
//!   size), as fabtests' `rma_pingpong` does (`ft_rma_poll_buf`: a write
//!   makes no completion at the target); then it writes back the same way.
//!   Below the inject size the write goes with `fi_inject_write` (no
//!   completion), as in fabtests, except with `-v`.
//! - writedata: the same with `fi_writedata`, noticed by the remote CQ data
//!   completion on the target's receive queue, whose data is the sequence
//!   number; a receive stays posted there, which that completion consumes
//!   where the endpoint has mode `FI_RX_CQ_DATA` (fi_rma(3)), and is posted
//!   again at once.
//! - read: the client reads the server's region into its buffer, whose last
//!   byte it spoils first: one read is one round trip. The server only
//!   drives progress until the client's next control message.
//!
//! Every iteration checks the sequence byte (a missed or stale transfer
//! stalls and fails after [`STALL`]); the last one (every one with `-v`,
//! each with its own pattern) checks every byte. Both sides read both
//! queues while they wait: the providers move RMA data when their queues
//! are read.

use super::cli::{Op, Options};
use super::control::{Control, Kind, FLAG_VERIFY};
use super::report::Row;
use super::setup::Link;
use super::transfer::{check, fill, Progress, SPINS_PER_CHECK, STALL};
use super::Res;
use libfabric::cq::{CompletionFlags, CompletionQueue, CqError, CqRead, Data, DataEntry};
use libfabric::mr::{MemoryRegion, MrAccess, RemoteRegion};
use libfabric::{Buffer, BufferPool, Errno};
use std::time::{Duration, Instant};

/// The sequence byte of a region before the first write of a size.
const INIT: u8 = 0xff;
/// A region whose sequence byte arrived may wait this long for the rest
/// of the write before the check fails (a provider may place the bytes of
/// one write in any order; tcp, rxm and rxd place them in order).
const SETTLE: Duration = Duration::from_secs(1);
/// A read-mode server looks for the client's next control message this
/// often.
const CONTROL_EVERY: Duration = Duration::from_millis(1);

/// A remote CQ data completion read while waiting for something else.
struct Arrived {
    data: u64,
}

/// One side of an RMA run.
struct Rma<'l> {
    link: &'l Link<Data>,
    pool: &'l BufferPool,
    op: Op,
    side: &'static str,
    /// What the peer writes into (write, writedata) or reads (read, on the
    /// server); `None` for the client of a read run.
    region: Option<MemoryRegion<Vec<u8>>>,
    /// The peer's region; `None` for the server of a read run.
    remote: Option<RemoteRegion>,
    /// The buffer RMA goes from (write) or into (read).
    tx: Option<Buffer>,
    /// A transmit completion's buffer, read while waiting for something else.
    tx_back: Option<Buffer>,
    arrived: Option<Arrived>,
    verify: bool,
    /// What the domain's remote CQ data can hold.
    data_mask: u64,
    scratch: Vec<u8>,
    progress: Progress,
}

/// The region a side registers for `op`, and its access.
fn access(op: Op, server: bool) -> Option<MrAccess> {
    match (op, server) {
        (Op::Msg, _) | (Op::Read, false) => None,
        (Op::Write | Op::WriteData, _) => Some(MrAccess::REMOTE_WRITE),
        (Op::Read, true) => Some(MrAccess::REMOTE_READ),
    }
}

impl<'l> Rma<'l> {
    fn new(
        link: &'l Link<Data>,
        tx: Buffer,
        op: Op,
        server: bool,
        progress: Progress,
    ) -> Res<Self> {
        let size = tx.len();
        let region = match access(op, server) {
            Some(access) => Some(MemoryRegion::register(
                &link.domain,
                vec![0u8; size],
                access,
            )?),
            None => None,
        };
        let data_bytes = link.ep.info().cq_data_size();
        if op == Op::WriteData && data_bytes == 0 {
            return Err(format!(
                "provider {} carries no remote CQ data (cq_data_size 0): -o writedata needs it",
                link.ep.info().provider()
            )
            .into());
        }
        let data_mask = match data_bytes {
            0 => 0,
            n if n >= 8 => u64::MAX,
            n => (1u64 << (n * 8)) - 1,
        };
        Ok(Rma {
            link,
            pool: link.pool.as_ref().ok_or("the link has no buffers")?,
            op,
            side: if server { "server" } else { "client" },
            region,
            remote: None,
            tx: Some(tx),
            tx_back: None,
            arrived: None,
            verify: false,
            data_mask,
            scratch: vec![0u8; size],
            progress,
        })
    }

    /// This side's region as the peer reaches it, as bytes (empty: none).
    fn advertised(&self) -> Vec<u8> {
        self.region
            .as_ref()
            .map_or(Vec::new(), |r| r.remote().to_bytes().to_vec())
    }

    /// Takes the peer's region from its `Region` message.
    fn learn(&mut self, bytes: &[u8], needed: bool) -> Res<()> {
        if !needed {
            return Ok(());
        }
        if bytes.is_empty() {
            return Err(format!("the {} side sent no region", peer(self.side)).into());
        }
        let remote = RemoteRegion::from_bytes(bytes)?;
        let size = self.scratch.len() as u64;
        if remote.len < size {
            return Err(format!(
                "the {} side's region has {} bytes, fewer than the {size} of the run",
                peer(self.side),
                remote.len
            )
            .into());
        }
        self.remote = Some(remote);
        Ok(())
    }

    fn tx(&mut self) -> Res<&mut Buffer> {
        self.tx.as_mut().ok_or_else(|| "no transmit buffer".into())
    }

    fn region(&mut self) -> Res<&mut MemoryRegion<Vec<u8>>> {
        self.region.as_mut().ok_or_else(|| "no region".into())
    }

    /// Describes an error completion.
    fn failed(&self, cq: &CompletionQueue<Data>, mut err: CqError<'_>, what: &str) -> super::Error {
        let _ = self.pool.reclaim_err(&mut err);
        let hint = match err.err {
            Errno::CANCELED | Errno::CONNRESET | Errno::NOTCONN | Errno::SHUTDOWN => {
                format!(": {} closed the connection", self.link.peer_name)
            }
            _ => String::new(),
        };
        format!(
            "{}: {what} failed with {} ({}){hint}",
            self.side,
            err.err,
            cq.strerror(&err)
        )
        .into()
    }

    /// Reads each queue once: keeps a transmit completion's buffer and a
    /// remote CQ data completion for the waits, reposts a receive a
    /// completion handed back. Anything else is an error.
    fn poll(&mut self) -> Res<()> {
        let mut entries: [DataEntry; 1] = Default::default();
        match self.link.tx_cq.read(&mut entries)? {
            CqRead::Completions(done) => {
                let buf = self
                    .pool
                    .reclaim(&done[0])
                    .ok_or("a transmit completion for a buffer that is not ours")?;
                if self.tx_back.replace(buf).is_some() {
                    return Err("two transmit completions for one RMA".into());
                }
            }
            CqRead::Error(err) => return Err(self.failed(&self.link.tx_cq, *err, "an RMA")),
            _ => {}
        }
        match self.link.rx_cq.read(&mut entries)? {
            CqRead::Completions(done) => {
                let (flags, data) = (done[0].flags(), done[0].data());
                let consumed = self.pool.reclaim(&done[0]);
                drop(done);
                if let Some(buf) = consumed {
                    self.link.ep.recv(buf).map_err(libfabric::Error::from)?;
                }
                if self.op != Op::WriteData || !flags.contains(CompletionFlags::REMOTE_CQ_DATA) {
                    return Err(format!(
                        "{}: an unexpected receive completion (flags {flags:?})",
                        self.side
                    )
                    .into());
                }
                if self.arrived.replace(Arrived { data }).is_some() {
                    return Err(format!(
                        "{}: two writes from {} where one was due",
                        self.side, self.link.peer_name
                    )
                    .into());
                }
            }
            CqRead::Error(err) => {
                return Err(self.failed(&self.link.rx_cq, *err, "a remote write's completion"))
            }
            _ => {}
        }
        Ok(())
    }

    /// Polls until `done` says yes, failing after [`STALL`] without.
    fn wait_for(&mut self, what: &str, mut done: impl FnMut(&mut Self) -> Res<bool>) -> Res<()> {
        let mut spins = 0u32;
        let mut since = None;
        loop {
            if done(self)? {
                return Ok(());
            }
            self.poll()?;
            spins += 1;
            if !spins.is_multiple_of(SPINS_PER_CHECK) {
                continue;
            }
            let since = *since.get_or_insert_with(Instant::now);
            if since.elapsed() > STALL {
                return Err(format!(
                    "{}: no {what} from {} for {STALL:?}: the peer stopped answering",
                    self.side, self.link.peer_name
                )
                .into());
            }
        }
    }

    /// Posts the op for the first `size` bytes of the buffer (retrying
    /// while the provider says -FI_EAGAIN) and waits for its completion.
    fn post(&mut self, size: usize, iter: usize) -> Res<()> {
        let remote = self.remote.ok_or("no peer region")?;
        let (ep, peer) = (&self.link.ep, self.link.peer);
        let inject = self.op == Op::Write && size <= self.link.inject_size && !self.verify;
        let mut deadline = None;
        if inject {
            loop {
                let tx = self.tx.as_ref().ok_or("no transmit buffer")?;
                match ep.inject_write(&tx[..size], &remote, 0, peer) {
                    Ok(()) => return Ok(()),
                    Err(e) if e.is_again() => self.refused(&mut deadline)?,
                    Err(e) => return Err(e.into()),
                }
            }
        }
        let data = iter as u64 & self.data_mask;
        let mut buf = self.tx.take().ok_or("no transmit buffer")?;
        loop {
            let posted = match self.op {
                Op::Write => ep.write(buf, size, &remote, 0, peer),
                Op::WriteData => ep.write_data(buf, size, data, &remote, 0, peer),
                Op::Read => ep.read(buf, size, &remote, 0, peer),
                Op::Msg => return Err("not an RMA run".into()),
            };
            match posted {
                Ok(()) => break,
                Err((back, e)) if e.is_again() => {
                    buf = back;
                    self.refused(&mut deadline)?;
                }
                Err((_, e)) => return Err(e.into()),
            }
        }
        self.wait_for("RMA completion", |s| Ok(s.tx_back.is_some()))?;
        self.tx = self.tx_back.take();
        Ok(())
    }

    /// A post refused with -FI_EAGAIN: progress, and a limit.
    fn refused(&mut self, deadline: &mut Option<Instant>) -> Res<()> {
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + STALL);
        if Instant::now() > deadline {
            return Err(format!(
                "{}: the provider kept refusing RMA to {} (-FI_EAGAIN) for {STALL:?}",
                self.side, self.link.peer_name
            )
            .into());
        }
        self.poll()
    }

    /// Sets this side's sequence byte for a new size, before the peer may
    /// write.
    fn arm(&mut self, size: usize) -> Res<()> {
        if matches!(self.op, Op::Write | Op::WriteData) {
            self.region()?.write_at(size - 1, &[INIT])?;
        }
        Ok(())
    }

    /// Fills the buffer with the message of iteration `iter` (pattern `p`,
    /// sequence byte).
    fn prepare(&mut self, size: usize, iter: usize, p: Option<usize>) -> Res<()> {
        let tx = self.tx()?;
        if let Some(p) = p {
            fill(&mut tx[..size], p);
        }
        tx[size - 1] = iter as u8;
        Ok(())
    }

    /// Waits for the peer's write of iteration `iter` into this side's
    /// region and checks it: the sequence byte (and the CQ data) always,
    /// every byte when `full`.
    fn take_write(&mut self, size: usize, iter: usize, full: Option<usize>) -> Res<()> {
        let seq = iter as u8;
        match self.op {
            Op::Write => self.wait_for("write", |s| {
                let mut last = [0u8];
                s.region()?.read_at(size - 1, &mut last)?;
                Ok(last[0] == seq)
            })?,
            Op::WriteData => {
                self.wait_for("remote CQ data completion", |s| Ok(s.arrived.is_some()))?;
                let arrived = self.arrived.take().ok_or("no completion")?;
                let want = iter as u64 & self.data_mask;
                if arrived.data != want {
                    return Err(format!(
                        "{}: write {iter} carried CQ data {}, not {want}: a write was missed",
                        self.side, arrived.data
                    )
                    .into());
                }
                let mut last = [0u8];
                self.region()?.read_at(size - 1, &mut last)?;
                if last[0] != seq {
                    return Err(format!(
                        "{}: write {iter} completed but its last byte is {}, not {seq}",
                        self.side, last[0]
                    )
                    .into());
                }
            }
            Op::Read | Op::Msg => return Err("not a write run".into()),
        }
        if let Some(p) = full {
            self.check_region(size, iter, p)?;
        }
        Ok(())
    }

    /// Checks every byte of the region against pattern `p` with the
    /// sequence byte of `iter` last; a write mode region may wait
    /// [`SETTLE`] for the rest of the write.
    fn check_region(&mut self, size: usize, iter: usize, p: usize) -> Res<()> {
        let settle = Instant::now() + SETTLE;
        loop {
            let mut copy = std::mem::take(&mut self.scratch);
            self.region()?.read_at(0, &mut copy[..size])?;
            let checked = check(&copy[..size - 1], p, self.side).and_then(|()| {
                match copy[size - 1] == iter as u8 {
                    true => Ok(()),
                    false => {
                        Err(format!("{}: message {iter}: wrong sequence byte", self.side).into())
                    }
                }
            });
            self.scratch = copy;
            match checked {
                Ok(()) => return Ok(()),
                Err(e) if self.op != Op::Write || Instant::now() > settle => return Err(e),
                Err(_) => self.poll()?,
            }
        }
    }

    /// The client's loop of one size.
    fn client_loop(&mut self, size: usize, iterations: usize) -> Res<Duration> {
        if self.op == Op::Read {
            // The server's region holds pattern 0.
            let mut probe = std::mem::take(&mut self.scratch);
            fill(&mut probe[..size], 0);
            let expected = probe[size - 1];
            self.scratch = probe;
            let start = Instant::now();
            for i in 0..iterations {
                // A read that did not happen leaves this byte.
                self.tx()?[size - 1] = !expected;
                self.post(size, i)?;
                let tx = self.tx()?;
                if tx[size - 1] != expected {
                    return Err(format!("client: read {i} did not bring the region's bytes").into());
                }
                if self.verify || i + 1 == iterations {
                    check(&self.tx()?[..size], 0, "client")?;
                }
                if i % 1024 == 1023 {
                    self.progress.tick("client", size, i + 1, iterations);
                }
            }
            return Ok(start.elapsed());
        }
        if !self.verify {
            self.prepare(size, 0, Some(0))?;
        }
        let start = Instant::now();
        for i in 0..iterations {
            let p = self.verify.then_some(i);
            self.prepare(size, i, p)?;
            self.post(size, i)?;
            let full = (self.verify || i + 1 == iterations).then_some(p.unwrap_or(0));
            self.take_write(size, i, full)?;
            if i % 1024 == 1023 {
                self.progress.tick("client", size, i + 1, iterations);
            }
        }
        Ok(start.elapsed())
    }

    /// The server's loop of one size (write, writedata).
    fn server_loop(&mut self, size: usize, iterations: usize) -> Res<Duration> {
        if !self.verify {
            self.prepare(size, 0, Some(0))?;
        }
        let start = Instant::now();
        for i in 0..iterations {
            let p = self.verify.then_some(i);
            let full = (self.verify || i + 1 == iterations).then_some(p.unwrap_or(0));
            self.take_write(size, i, full)?;
            self.prepare(size, i, p)?;
            self.post(size, i)?;
            if i % 1024 == 1023 {
                self.progress.tick("server", size, i + 1, iterations);
            }
        }
        Ok(start.elapsed())
    }

    /// A read run's server: progress until the client's next control
    /// message; any completion is an error.
    fn serve_reads(&mut self, ctrl: &Control) -> Res<Duration> {
        let start = Instant::now();
        let mut next = start;
        loop {
            self.poll()?;
            if self.tx_back.is_some() {
                return Err("server: a transmit completion in a read run".into());
            }
            let now = Instant::now();
            if now >= next {
                if ctrl.pending()? {
                    return Ok(start.elapsed());
                }
                next = now + CONTROL_EVERY;
            }
        }
    }
}

fn peer(side: &str) -> &'static str {
    if side == "server" {
        "client"
    } else {
        "server"
    }
}

fn xfers(op: Op) -> usize {
    if op == Op::Read {
        1
    } else {
        2
    }
}

/// The client side of an RMA run, after the connection: the region
/// exchange, then one row per size.
pub fn client(link: &Link<Data>, tx: Buffer, ctrl: &mut Control, opts: &Options) -> Res<Vec<Row>> {
    let mut r = Rma::new(link, tx, opts.op, false, Progress::new(true))?;
    r.verify = opts.verify;
    ctrl.send(Kind::Region, 0, 0, &r.advertised())?;
    let theirs = ctrl.expect(Kind::Region)?;
    r.learn(&theirs.bytes, true)?;
    let mut rows = Vec::with_capacity(opts.sizes.len());
    for &size in &opts.sizes {
        let iterations = opts.iterations_for(size);
        r.arm(size)?;
        ctrl.send(Kind::Sync, size as u64, iterations as u64, &[])?;
        ctrl.expect(Kind::SyncAck)?;
        let elapsed = r.client_loop(size, iterations)?;
        rows.push(Row {
            size,
            iterations,
            elapsed,
            xfers: xfers(opts.op),
        });
    }
    ctrl.send(Kind::Done, 0, 0, &[])?;
    ctrl.expect(Kind::DoneAck)?;
    Ok(rows)
}

/// The server side of an RMA run, after the connection. `flags` are those
/// of the client's `Hello`.
pub fn server(
    link: &Link<Data>,
    tx: Buffer,
    ctrl: &mut Control,
    op: Op,
    flags: u64,
    progress: bool,
) -> Res<Vec<Row>> {
    let mut r = Rma::new(link, tx, op, true, Progress::new(progress))?;
    r.verify = flags & FLAG_VERIFY != 0;
    if op == Op::Read {
        // What the client reads: pattern 0 over the whole region.
        let mut pattern = vec![0u8; r.scratch.len()];
        fill(&mut pattern, 0);
        r.region()?.write_at(0, &pattern)?;
    }
    let theirs = ctrl.expect(Kind::Region)?;
    r.learn(&theirs.bytes, op != Op::Read)?;
    ctrl.send(Kind::Region, 0, 0, &r.advertised())?;
    let mut rows = Vec::new();
    loop {
        let msg = ctrl.recv()?;
        match msg.kind {
            Kind::Sync => {
                let (size, iterations) = (msg.a as usize, msg.b as usize);
                if size == 0 || size > r.scratch.len() {
                    return Err(format!(
                        "the client asked for {size} bytes: RMA needs 1 to {}",
                        r.scratch.len()
                    )
                    .into());
                }
                r.arm(size)?;
                ctrl.send(Kind::SyncAck, 0, 0, &[])?;
                let elapsed = if op == Op::Read {
                    r.serve_reads(ctrl)?
                } else {
                    r.server_loop(size, iterations)?
                };
                rows.push(Row {
                    size,
                    iterations,
                    elapsed,
                    xfers: xfers(op),
                });
            }
            Kind::Done => {
                ctrl.send(Kind::DoneAck, 0, 0, &[])?;
                return Ok(rows);
            }
            other => return Err(format!("unexpected {other:?} from {}", link.peer_name).into()),
        }
    }
}
